"""NativeEngine: the Engine protocol over our own LLMEngine.

One background thread owns the LLMEngine and runs its step loop; requests and aborts reach it
through a thread-safe command queue, and each request's outputs travel back to the caller's
event loop through an asyncio.Queue. The chat layer (prompt rendering, M3 output parsing) runs
on the caller's side, so the engine thread does nothing but tokens.

Which process holds it: `m3agent serve` does (app/serve). `m3agent run --engine native` and the
TUI do not, by default: they start or reuse a background `m3agent serve` of the model
(app/warm.py, chosen in app/engine_build.py) and talk to it through the remote backend
(backends/remote.py), so the prefix cache outlives each run. Only `--in-process` (config
`warm = false`) and the tests build this class in the agent's own process.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..api import (
    ChatDelta,
    ChatRequest,
    EngineError,
    EngineInfo,
    EngineName,
    EngineRequestError,
    EngineStats,
    EngineUnavailable,
    PrefillProgress,
    SamplingParams,
)
from ..m3.chat import ChatLayer, Turn
from ..m3.chat_template import ChatTemplate
from ..native.core.engine_config import EngineConfig
from ..native.core.llm_engine import LLMEngine
from ..native.core.outputs import PrefillStep, RequestOutput
from ..native.core.sampling_params import sampling_error
from .completion import CompletionEngine, CompletionRequest, prompt_ids

if TYPE_CHECKING:
    from ..native.runner.mm_inputs import MultiModalInputs
    from ..offload.config import OffloadConfig
    from .native_media import NativeMedia


@dataclass(frozen=True, slots=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    sink: asyncio.Queue[_SinkItem]
    mm_inputs: MultiModalInputs | None = None  # when the prompt carries images/videos


@dataclass(frozen=True, slots=True)
class _Abort:
    request_id: str


class _Stop:
    """The engine thread's last command (close)."""


_STOP = _Stop()

# What a request's sink carries: outputs, prompt progress, or the error that ends it.
_SinkItem = RequestOutput | PrefillStep | Exception


class NativeEngine:
    def __init__(
        self,
        engine: LLMEngine,
        tokenizer: Any,
        model_name: str = "native",
        template: ChatTemplate | None = None,
        extra_stop_token_ids: tuple[int, ...] = (),
        media: NativeMedia | None = None,  # when the engine has a vision tower
    ) -> None:
        self._engine = engine
        self._model_name = model_name
        self._extra_stops = extra_stop_token_ids
        self._media = media
        self._commands: queue.SimpleQueue[_Add | _Abort | _Stop] = queue.SimpleQueue()
        self._sinks: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Queue[_SinkItem]]] = {}
        self._chat = ChatLayer(tokenizer, template)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="m3agent-native-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_model_dir(
        cls,
        path: str | Path,
        device: str = "cpu",
        dtype: str = "float32",
        config: EngineConfig | None = None,
        progress: Callable[[int, int], None] | None = None,
        offload: OffloadConfig | None = None,
    ) -> NativeEngine:
        """The engine through native's front door (`LLM.from_model_dir`), plus the chat
        template and the media preprocessing; any failure is one EngineUnavailable line.
        progress(bytes done, bytes total) while the weights load. offload: an
        offload.placement.OffloadConfig puts M3's routed experts in host memory (CPU compute)."""
        from ..m3.tokenizer import M3Tokenizer
        from ..m3.tokens import EOS
        from ..native.llm import LLM
        from .native_media import NativeMedia

        llm = LLM.from_model_dir(
            path, device=device, dtype=dtype, config=config, progress=progress, offload=offload
        )
        tokenizer = llm.tokenizer
        if not isinstance(tokenizer, M3Tokenizer):
            raise EngineUnavailable(
                f"cannot load the native model from {path}: no M3 tokenizer.json "
                "(chat needs M3's; `m3agent generate` runs other models)"
            )
        try:
            template = ChatTemplate.from_model_dir(path)
            media = None
            if llm.runner.vision is not None:
                media = NativeMedia.for_checkpoint(Path(path), tokenizer)
        except (ValueError, OSError) as e:
            raise EngineUnavailable(f"cannot load the native model from {path}: {e}") from e
        eos = tokenizer.token_to_id(EOS)
        stops = (eos,) if eos is not None else ()
        return cls(llm, tokenizer, Path(path).name, template, stops, media)

    # ---- Engine protocol ----------------------------------------------------------------

    def info(self) -> EngineInfo:
        return EngineInfo(EngineName.NATIVE, self._model_name, self._engine.max_model_len)

    @property
    def host_tier_reason(self) -> str:
        """One line: whether the KV host-memory tier is on, and why."""
        return self._engine.host_tier_reason

    def stats(self) -> EngineStats:
        return self._chat.stats.get()

    async def abort(self, request_id: str) -> None:
        self._commands.put(_Abort(request_id))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._commands.put(_STOP)
        await asyncio.to_thread(self._thread.join)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        if self._closed:
            raise EngineUnavailable("the native engine is closed")
        prompt = self._chat.render(request)
        ids = list(prompt.token_ids)
        mm = None
        if any(m.media for m in request.messages if m.role in ("user", "tool")):
            if self._media is None:
                raise EngineRequestError(
                    f"{self._model_name} is a text-only checkpoint (no vision tower): "
                    "images and videos are unsupported"
                )
            # Decoding and resizing are CPU work: off the event loop, never on the engine thread.
            ids, mm = await asyncio.to_thread(self._media.prepare, request.messages, ids)
        turn = self._chat.start(request, prompt)
        # aclosing: a consumer that stops early closes the inner generator now, which aborts.
        async with contextlib.aclosing(
            self._generate(request.request_id, ids, request.sampling, mm, turn)
        ) as deltas:
            async for d in deltas:
                yield d

    async def complete(self, request: CompletionRequest) -> AsyncIterator[ChatDelta]:
        """A raw completion (/v1/completions): the text unparsed, then the UsageDelta."""
        if self._closed:
            raise EngineUnavailable("the native engine is closed")
        ids = prompt_ids(request, self._chat)
        turn = self._chat.start_raw(len(ids))
        async with contextlib.aclosing(
            self._generate(request.request_id, ids, request.sampling, None, turn)
        ) as deltas:
            async for d in deltas:
                yield d

    async def _generate(
        self,
        request_id: str,
        ids: list[int],
        s: SamplingParams,
        mm: MultiModalInputs | None,
        turn: Turn,
    ) -> AsyncGenerator[ChatDelta, None]:
        params = replace(s, stop_token_ids=s.stop_token_ids + self._extra_stops)
        why = sampling_error(params)
        if why is not None:
            raise EngineRequestError(f"bad sampling parameters: {why}")
        sink: asyncio.Queue[_SinkItem] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self._commands.put(_Add(request_id, ids, params, loop, sink, mm))
        try:
            while True:
                item = await sink.get()
                if isinstance(item, Exception):
                    turn.finished = True
                    raise item
                if isinstance(item, PrefillStep):  # a chunk of the prompt is computed
                    yield PrefillProgress(
                        item.num_prompt_tokens,
                        item.num_computed_tokens,
                        item.num_cached_tokens,
                        item.elapsed_s,
                    )
                    continue
                out: RequestOutput = item
                for d in turn.feed(out.new_text):
                    yield d
                if out.finished:
                    for d in turn.finish(
                        out.finish_reason,
                        prompt_tokens=out.num_prompt_tokens,
                        cached_tokens=out.num_cached_tokens,
                        restored_tokens=out.num_restored_tokens,
                        host_tokens=out.num_host_tokens,
                        generated_tokens=out.num_generated_tokens,
                        time_to_first_token_s=out.metrics.time_to_first_token_s,
                        error=out.error and f"the native engine failed: {out.error}",
                    ):
                        yield d
                    return
        finally:
            if not turn.finished:  # the consumer stopped early (cancelled): free the pages
                self._commands.put(_Abort(request_id))

    # ---- the engine thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            block = not self._engine.has_unfinished_requests()
            try:
                while True:
                    cmd = self._commands.get(block=block)
                    block = False
                    if isinstance(cmd, _Stop):
                        self._shutdown()
                        return
                    self._handle(cmd)
            except queue.Empty:
                pass
            if not self._engine.has_unfinished_requests():
                continue
            try:
                outputs = self._engine.step()
            except Exception as e:  # a runtime bug: fail what is running, keep the thread
                self._fail_all(EngineError(f"the native engine failed: {type(e).__name__}: {e}"))
                continue
            for p in self._engine.prefill_steps:  # before the step's first token
                target = self._sinks.get(p.request_id)
                if target is not None:
                    _put(*target, p)
            for out in outputs:
                self._deliver(out)

    def _handle(self, cmd: _Add | _Abort) -> None:
        if isinstance(cmd, _Abort):
            out = self._engine.abort(cmd.request_id)
            if out is not None:
                self._deliver(out)
            return
        try:
            self._engine.add_request(
                cmd.request_id, cmd.prompt_token_ids, cmd.params, mm_inputs=cmd.mm_inputs
            )
        except Exception as e:  # whatever it is, it ends this request, never the engine thread
            err = (
                e if isinstance(e, EngineError) else EngineRequestError(f"{type(e).__name__}: {e}")
            )
            _put(cmd.loop, cmd.sink, err)
            return
        self._sinks[cmd.request_id] = (cmd.loop, cmd.sink)

    def _deliver(self, out: RequestOutput) -> None:
        target = self._sinks.get(out.request_id)
        if out.finished:
            self._sinks.pop(out.request_id, None)
        if target is not None:
            _put(*target, out)

    def _fail_all(self, error: EngineError) -> None:
        for request_id in list(self._sinks):
            self._engine.abort(request_id)
            _put(*self._sinks.pop(request_id), error)

    def _shutdown(self) -> None:
        self._fail_all(EngineUnavailable("the native engine was closed"))
        self._engine.close()  # the pages still queued for the disk tier are written


def _put(loop: asyncio.AbstractEventLoop, sink: asyncio.Queue[_SinkItem], item: _SinkItem) -> None:
    try:
        loop.call_soon_threadsafe(sink.put_nowait, item)
    except RuntimeError:  # the caller's loop is gone; nobody is listening any more
        pass


if TYPE_CHECKING:  # mypy checks the declared capability: NativeEngine is a CompletionEngine

    def _serves_completions(engine: NativeEngine) -> CompletionEngine:
        return engine
