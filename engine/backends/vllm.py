"""VllmEngine: the Engine protocol over vLLM's AsyncLLM, in this process, on the local GPUs.

vLLM does the token level (paged KV cache with prefix caching, chunked prefill, MSA kernels,
speculative decoding); our m3 layer does the chat level exactly as for every other backend:
`render_prompt` builds the prompt (thinking mode per request), `M3OutputParser` splits the
output into reasoning, content and tool calls, and images/videos are preprocessed by
m3/media and handed over as vLLM multimodal data. This is the only module that imports
vllm, and only when an engine is built.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from m3agent.engine.api import (
    ChatDelta,
    ChatRequest,
    EngineError,
    EngineInfo,
    EngineRequestError,
    EngineStats,
    EngineUnavailable,
    Message,
    PromptTooLong,
    ToolCallDelta,
    Usage,
    UsageDelta,
)
from m3agent.engine.backends.vllm_args import (
    EnginePlan,
    GpuInfo,
    VllmOptions,
    plan_engine_args,
    probe_gpus,
)
from m3agent.engine.backends.vllm_errors import load_error
from m3agent.engine.model_source import checkpoint_facts, resolve_model


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
    def __init__(self, engine: Any, vllm: Any, plan: EnginePlan, model_name: str,
                 template: Any = None, tokenizer: Any = None, media_config: Any = None):
        self._engine = engine
        self._vllm = vllm
        self.plan = plan
        self._model_name = model_name
        self._template = template
        self._tokenizer = tokenizer
        self._media_config = media_config
        self._aborted: set[str] = set()
        self._abort_events: dict[str, asyncio.Event] = {}
        self._stats = EngineStats()
        self._closed = False

    @classmethod
    def from_model_dir(cls, path: str | Path, options: VllmOptions | None = None,
                       gpus: GpuInfo | None = None) -> VllmEngine:
        """Plans the arguments, then loads; every failure is one EngineUnavailable line."""
        from m3agent.engine.m3.chat_template import ChatTemplate
        from m3agent.engine.m3.tokenizer import M3Tokenizer

        resolved = resolve_model(str(path))
        options = options or VllmOptions()
        facts = checkpoint_facts(resolved.path)
        vllm = _import_vllm()
        version = str(getattr(vllm, "__version__", "unknown"))
        plan = plan_engine_args(str(resolved.path), facts, gpus or probe_gpus(), options, version)
        try:
            template = ChatTemplate.from_model_dir(resolved.path)
            tokenizer = M3Tokenizer.from_model_dir(resolved.path)
            media_config = _media_config(resolved.path)  # before the load: fail cheaply
        except (OSError, ValueError) as e:
            raise EngineUnavailable(f"cannot read the tokenizer or chat template of "
                                    f"{resolved.path}: {e}") from None
        try:
            engine_args = vllm.AsyncEngineArgs(**plan.engine_args)
            engine = _async_llm_class(vllm).from_engine_args(engine_args)
        except EngineError:
            raise
        except BaseException as e:  # vLLM raises all sorts; SystemExit from a worker too
            if isinstance(e, KeyboardInterrupt):
                raise
            raise load_error(e, resolved.path, plan) from None
        name = resolved.repo_id or resolved.path.name
        return cls(engine, vllm, plan, name, template, tokenizer, media_config)

    # ---- Engine protocol ----------------------------------------------------------------

    def info(self) -> EngineInfo:
        return EngineInfo("vllm", self._model_name, self.plan.max_model_len)

    def stats(self) -> EngineStats:
        return self._stats

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
        from m3agent.engine.m3.chat_template import render_prompt_parts
        from m3agent.engine.m3.output_parser import M3OutputParser

        if self._closed:
            raise EngineUnavailable("the vllm engine is closed")
        started = time.monotonic()
        parts = render_prompt_parts(list(request.messages), list(request.tools),
                                    request.thinking_mode, template=self._template,
                                    session_thinking_mode=request.session_thinking_mode)
        # Token ids, encoded run by run: markup typed inside a message or a tool result stays
        # text instead of becoming a control token (vLLM would tokenize a string whole).
        ids = list(self._tokenizer.encode_parts(parts))
        if len(ids) >= self.plan.max_model_len:
            raise PromptTooLong(len(ids), self.plan.max_model_len)
        prompt: dict[str, Any] = {"prompt_token_ids": ids}
        mm = self._multimodal(request.messages)
        if mm:
            prompt["multi_modal_data"] = mm
        params = self._sampling(request)
        parser = M3OutputParser(list(request.tools), request.thinking_mode)
        rid = request.request_id
        self._aborted.discard(rid)
        self._abort_events[rid] = stop = asyncio.Event()
        raw: list[str] = []
        generated = prompt_tokens = cached = 0
        first_at: float | None = None
        finish: str | None = None
        saw_call = False
        finished = False
        try:
            try:
                outputs = _until(self._engine.generate(prompt, params, rid), stop)
                async with contextlib.aclosing(outputs):
                    async for out in outputs:
                        prompt_tokens = len(out.prompt_token_ids or ()) or prompt_tokens
                        cached = int(getattr(out, "num_cached_tokens", 0) or 0) or cached
                        comp = out.outputs[0] if out.outputs else None
                        deltas: list[ChatDelta] = []
                        if comp is not None and comp.text:
                            if first_at is None:
                                first_at = time.monotonic() - started
                            raw.append(comp.text)
                            deltas = parser.feed(comp.text)
                        if comp is not None:
                            generated += len(comp.token_ids or ())
                        if out.finished:
                            finished = True
                            finish = comp.finish_reason if comp is not None else None
                            deltas += parser.finish()
                        for d in deltas:
                            saw_call = saw_call or isinstance(d, ToolCallDelta)
                            yield d
                        if out.finished:
                            break
            except (ValueError, TypeError) as e:  # vLLM rejects a request with ValueError
                finished = True
                raise EngineRequestError(f"vLLM rejected the request: {_first_line(e)}") from None
            except asyncio.CancelledError:
                raise
            except EngineError:
                finished = True
                raise
            except Exception as e:  # the engine died (EngineDeadError) or a worker failed
                finished = True
                raise EngineError(f"vLLM failed: {type(e).__name__}: {_first_line(e)}") from None
            aborted = rid in self._aborted or not finished or finish == "abort"
            if not finished:
                for d in parser.finish():
                    saw_call = saw_call or isinstance(d, ToolCallDelta)
                    yield d
                finished = True
            reason = ("abort" if aborted else "length" if finish == "length"
                      else "tool_calls" if saw_call else "stop")
            usage = Usage(prompt_tokens, cached, generated, first_at, time.monotonic() - started)
            self._count(usage)
            yield UsageDelta(usage, reason, raw_text="".join(raw))  # type: ignore[arg-type]
        finally:
            self._aborted.discard(rid)
            self._abort_events.pop(rid, None)
            if not finished:  # the consumer stopped early (an interrupt): stop generating
                await self._engine.abort(rid)

    # ---- helpers ------------------------------------------------------------------------

    def _sampling(self, request: ChatRequest) -> Any:
        s = request.sampling
        kwargs: dict[str, Any] = {
            "max_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p,
            "top_k": s.top_k, "seed": s.seed, "stop": list(s.stop) or None,
            # Special tokens carry M3's markup (</mm:think>, tool calls): the parser needs them.
            "skip_special_tokens": False,
        }
        try:
            from vllm.sampling_params import RequestOutputKind
        except ImportError:  # an old vLLM: cumulative text is not handled, so refuse clearly
            raise EngineUnavailable("the installed vLLM has no RequestOutputKind; "
                                    "install vllm 0.33") from None
        kwargs["output_kind"] = RequestOutputKind.DELTA  # new text only, not the whole text
        try:
            return self._vllm.SamplingParams(**kwargs)
        except (ValueError, TypeError) as e:
            raise EngineRequestError(f"bad sampling parameters: {_first_line(e)}") from None

    def _multimodal(self, messages: tuple[Message, ...]) -> dict[str, Any]:
        parts = [p for m in messages for p in m.media]
        if not parts:
            return {}
        limits = self.plan.engine_args.get("limit_mm_per_prompt")
        if limits is None:
            raise EngineRequestError(
                f"{self._model_name} is served text-only (no vision tower loaded); "
                "start it with image/video limits above 0"
            )
        for kind in ("image", "video"):
            n = sum(1 for p in parts if p.kind == kind)
            if n > limits[kind]:
                raise EngineRequestError(f"{n} {kind}s in one request; the limit is {limits[kind]}")
        from m3agent.engine.m3.media import load_media
        from m3agent.engine.m3.media.vllm_data import to_vllm_multimodal_data

        try:
            items = [load_media(p, self._media_config) for p in parts]
        except OSError as e:  # MediaError is an EngineRequestError and passes as it is
            raise EngineRequestError(f"cannot read media: {e.strerror or e}") from None
        return to_vllm_multimodal_data(items, self._media_config)

    def _count(self, u: Usage) -> None:
        s = self._stats
        self._stats = EngineStats(s.requests + 1, s.prompt_tokens + u.prompt_tokens,
                                  s.cached_prompt_tokens + u.cached_prompt_tokens,
                                  s.generated_tokens + u.generated_tokens)


async def _until(outputs: AsyncIterator[Any], stop: asyncio.Event) -> AsyncIterator[Any]:
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


def _media_config(path: Path) -> Any:
    import json

    from m3agent.engine.m3.media import MediaConfig

    pre = path / "preprocessor_config.json"
    if pre.is_file():
        try:
            return MediaConfig.from_preprocessor_config(json.loads(pre.read_text()))
        except (OSError, ValueError) as e:
            raise EngineUnavailable(f"{pre} is unreadable: {e}") from None
    return MediaConfig()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
