"""VllmEngine: the Engine protocol over vLLM's AsyncLLM, in this process, on the local GPUs.

vLLM does the token level (paged KV cache with prefix caching, chunked prefill, MSA kernels,
speculative decoding); the shared chat layer (m3/chat.py) does the chat level exactly as for
every other token-level backend: the prompt rendered and encoded to ids, the output parsed
into reasoning, content and tool calls, finish reason, usage and stats. Images and videos are
preprocessed by m3/media and handed over as vLLM multimodal data. Before submission the
sampling values are checked by vLLM's rules and the prompt length is counted after media
expansion, as vLLM's input processor counts it; vLLM's own errors map through vllm_errors.
This is the only module that imports vllm, and only when an engine is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..api import (
    ChatDelta,
    ChatRequest,
    EngineError,
    EngineInfo,
    EngineName,
    EngineStats,
    EngineUnavailable,
    SamplingParams,
)
from ..m3.chat import ChatLayer, Turn, check_prompt_len
from ..m3.chat_template import ChatTemplate
from ..model_source import checkpoint_facts, resolve_model
from .completion import CompletionEngine, CompletionRequest, prompt_ids
from .vllm_args import (
    EnginePlan,
    GpuInfo,
    VllmOptions,
    plan_engine_args,
    probe_gpus,
)
from .vllm_core_log import CoreOutputTail
from .vllm_errors import load_error, request_error
from .vllm_media import expanded_len, media_config_of, media_items
from .vllm_sampling import check_sampling

if TYPE_CHECKING:
    from ..m3.media import MediaConfig


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as e:
        raise EngineUnavailable(
            f"the vllm engine needs vLLM (pip install vllm==0.33.*): {e}"
        ) from None
    return vllm


def _async_llm_class(vllm: Any) -> Any:
    try:
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM
    except ImportError:
        cls = getattr(vllm, "AsyncLLMEngine", None)
        if cls is None:
            raise EngineUnavailable(
                f"vLLM {getattr(vllm, '__version__', '?')} has no AsyncLLM; install vllm 0.33"
            ) from None
        return cls


class VllmEngine:
    def __init__(
        self,
        engine: Any,
        vllm: Any,
        plan: EnginePlan,
        model_name: str,
        template: ChatTemplate | None = None,
        tokenizer: Any = None,
        media_config: MediaConfig | None = None,
    ):
        self._engine = engine
        self._vllm = vllm
        self.plan = plan
        self._model_name = model_name
        self._media_config = media_config
        self._aborted: set[str] = set()
        self._abort_events: dict[str, asyncio.Event] = {}
        self._chat = ChatLayer(tokenizer, template)
        self._closed = False

    @classmethod
    def from_model_dir(
        cls, path: str | Path, options: VllmOptions | None = None, gpus: GpuInfo | None = None
    ) -> VllmEngine:
        """Plans the arguments, then loads; every failure is one EngineUnavailable line."""
        from ..m3.tokenizer import M3Tokenizer

        resolved = resolve_model(str(path))
        options = options or VllmOptions()
        facts = checkpoint_facts(resolved.path)
        vllm = _import_vllm()
        version = str(getattr(vllm, "__version__", "unknown"))
        plan = plan_engine_args(
            str(resolved.path),
            facts,
            gpus or probe_gpus(),
            options,
            version,
            have_lmcache=importlib.util.find_spec("lmcache") is not None,
        )
        for name, value in plan.env:  # LMCache's configuration; the user's own wins
            os.environ.setdefault(name, value)
        try:
            template = ChatTemplate.from_model_dir(resolved.path)
            tokenizer = M3Tokenizer.from_model_dir(resolved.path)
            media_config = media_config_of(resolved.path)  # before the load: fail cheaply
        except (OSError, ValueError) as e:
            raise EngineUnavailable(
                f"cannot read the tokenizer or chat template of {resolved.path}: {e}"
            ) from None
        tail = CoreOutputTail()
        try:
            with tail:  # the engine core's output passes through; its tail is kept
                engine_args = vllm.AsyncEngineArgs(**plan.engine_args)
                engine = _async_llm_class(vllm).from_engine_args(engine_args)
        except EngineError:
            raise
        except BaseException as e:  # vLLM raises all sorts; SystemExit from a worker too
            if isinstance(e, KeyboardInterrupt):
                raise
            raise load_error(e, resolved.path, plan, tail.root_cause()) from None
        name = resolved.repo_id or resolved.path.name
        return cls(engine, vllm, plan, name, template, tokenizer, media_config)

    # ---- Engine protocol ----------------------------------------------------------------

    def info(self) -> EngineInfo:
        return EngineInfo(EngineName.VLLM, self._model_name, self.plan.max_model_len)

    def stats(self) -> EngineStats:
        return self._chat.stats.get()

    async def abort(self, request_id: str) -> None:
        self._aborted.add(request_id)
        await self._engine.abort(request_id)
        event = self._abort_events.get(request_id)
        if event is not None:  # wake the stream even if vLLM sends no final output
            event.set()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        shutdown = getattr(self._engine, "shutdown", None)
        if shutdown is not None:
            await asyncio.to_thread(shutdown)

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        if self._closed:
            raise EngineUnavailable("the vllm engine is closed")
        check_sampling(request.sampling)  # vLLM's rules, before anything is built
        chat = self._chat
        prompt = chat.render(request)
        ids = list(prompt.token_ids)
        vllm_prompt: dict[str, Any] = {"prompt_token_ids": ids}
        items = media_items(request.messages, self.plan, self._model_name, self._media_config)
        # vLLM counts the prompt after each placeholder has grown into its vision tokens.
        expanded = expanded_len(ids, items, self._chat.tokenizer.encode_text)
        check_prompt_len(expanded, self.plan.max_model_len)
        if items:
            from ..m3.media.vllm_data import to_vllm_multimodal_data

            vllm_prompt["multi_modal_data"] = to_vllm_multimodal_data(items, self._media_config)
        turn = chat.start(request, prompt)
        async with contextlib.aclosing(
            self._generate(request.request_id, vllm_prompt, request.sampling, turn)
        ) as deltas:
            async for d in deltas:
                yield d

    async def complete(self, request: CompletionRequest) -> AsyncIterator[ChatDelta]:
        """A raw completion (/v1/completions): vLLM tokenizes a text prompt itself."""
        if self._closed:
            raise EngineUnavailable("the vllm engine is closed")
        check_sampling(request.sampling)
        ids = prompt_ids(request, self._chat)
        check_prompt_len(len(ids), self.plan.max_model_len)
        turn = self._chat.start_raw(len(ids))
        async with contextlib.aclosing(
            self._generate(request.request_id, {"prompt_token_ids": ids}, request.sampling, turn)
        ) as deltas:
            async for d in deltas:
                yield d

    async def _generate(
        self, rid: str, vllm_prompt: dict[str, Any], sampling: SamplingParams, turn: Turn
    ) -> AsyncGenerator[ChatDelta, None]:
        params = self._sampling(sampling)
        ids = vllm_prompt["prompt_token_ids"]
        self._aborted.discard(rid)
        self._abort_events[rid] = stop = asyncio.Event()
        generated = prompt_tokens = cached = 0
        finish: str | None = None
        ended = False  # vLLM said finished, or failed: nothing left to abort
        try:
            try:
                outputs = _until(self._engine.generate(vllm_prompt, params, rid), stop)
                async with contextlib.aclosing(outputs):
                    async for out in outputs:
                        prompt_tokens = len(out.prompt_token_ids or ()) or prompt_tokens
                        cached = int(getattr(out, "num_cached_tokens", 0) or 0) or cached
                        comp = out.outputs[0] if out.outputs else None
                        if comp is not None:
                            generated += len(comp.token_ids or ())
                            for d in turn.feed(comp.text):
                                yield d
                        if out.finished:
                            ended = True
                            finish = comp.finish_reason if comp is not None else None
                            break
            except asyncio.CancelledError:
                raise
            except EngineError:
                ended = True
                raise
            except Exception as e:  # VLLMValidationError, EngineGenerateError, EngineDeadError
                ended = True
                raise request_error(e) from None
            if rid in self._aborted or not ended:
                finish = "abort"
            ended = True
            for d in turn.finish(
                str(finish) if finish is not None else None,
                prompt_tokens=prompt_tokens or len(ids),
                cached_tokens=cached,
                generated_tokens=generated,
                error="vLLM ended the request with an internal error (retryable)",
            ):
                yield d
        finally:
            self._aborted.discard(rid)
            self._abort_events.pop(rid, None)
            if not ended:  # the consumer stopped early (an interrupt): stop generating
                await self._engine.abort(rid)

    # ---- helpers ------------------------------------------------------------------------

    def _sampling(self, s: SamplingParams) -> Any:
        kwargs: dict[str, Any] = {
            "max_tokens": s.max_tokens,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k,
            "seed": s.seed,
            "stop": list(s.stop) or None,
            # Special tokens carry M3's markup (</mm:think>, tool calls): the parser needs them.
            "skip_special_tokens": False,
        }
        try:
            from vllm.sampling_params import RequestOutputKind
        except ImportError:  # an old vLLM: cumulative text is not handled, so refuse clearly
            raise EngineUnavailable(
                "the installed vLLM has no RequestOutputKind; install vllm 0.33"
            ) from None
        kwargs["output_kind"] = RequestOutputKind.DELTA  # new text only, not the whole text
        try:
            return self._vllm.SamplingParams(**kwargs)
        except Exception as e:  # VLLMValidationError for a rule check_sampling does not know
            raise request_error(e) from None


async def _until(outputs: AsyncIterator[Any], stop: asyncio.Event) -> AsyncGenerator[Any, None]:
    """vLLM's outputs until `stop` is set. Cancelling the pending `__anext__` is how vLLM's
    own generate() learns that its caller left (it aborts the request on CancelledError)."""
    waiter = asyncio.ensure_future(stop.wait())
    try:
        while True:
            step = asyncio.ensure_future(outputs.__anext__())
            await asyncio.wait({step, waiter}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await step
                return
            try:
                yield step.result()
            except StopAsyncIteration:
                return
    finally:
        waiter.cancel()


if TYPE_CHECKING:  # mypy checks the declared capability: VllmEngine is a CompletionEngine

    def _serves_completions(engine: VllmEngine) -> CompletionEngine:
        return engine
