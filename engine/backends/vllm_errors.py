"""vLLM failures -> one EngineError line a user can act on.

Load: vLLM reports the same few causes through many exception types (torch.OutOfMemoryError,
RuntimeError from a worker, ValueError from the KV-cache check), so the message is matched;
with the multiprocess engine core the frontend only sees "Engine core initialization failed",
and the cause comes from the core's own output (vllm_core_log).

Requests (vLLM 0.33): `VLLMValidationError` (a `VLLMClientError`, not a ValueError) for bad
sampling values and prompts too long after media expansion; `EngineGenerateError` with no
message of its own, its cause chained; `EngineDeadError` once the core is gone. Matched by
class name along the MRO, so this module needs no vllm import.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..api import EngineError, EngineRequestError, EngineUnavailable

if TYPE_CHECKING:
    from .vllm_args import EnginePlan

_OOM = ("out of memory", "outofmemory", "cuda error: out of memory")
_KV = (
    "max seq len",
    "kv cache is needed",
    "larger than the maximum number of tokens",
    "not enough kv cache",
    "no available memory for the cache blocks",
)
_GPU = (
    "no cuda gpus",
    "not supported on",
    "unsupported gpu",
    "compute capability",
    "no kernel image",
    "sm_",
    "cuda driver",
    "found no nvidia driver",
)
_ARCH = ("model architectures", "not supported for now", "unrecognized configuration")


def load_error(
    e: BaseException, path: Path, plan: EnginePlan, root_cause: str | None = None
) -> EngineUnavailable:
    """`root_cause`: the engine core's own last exception line, when the frontend only got
    the "initialization failed" wrapper; it then decides the advice and is shown."""
    text = str(e) or type(e).__name__
    wrapped = bool(root_cause) and ("initialization failed" in text or "See root cause" in text)
    if wrapped:
        text = str(root_cause)
    low = (text if wrapped else f"{type(e).__name__}: {text}").lower()
    first = text.strip().splitlines()[0] if text.strip() else type(e).__name__
    tp = plan.engine_args.get("tensor_parallel_size")
    max_len = plan.engine_args.get("max_model_len")
    if any(k in low for k in _KV):
        return EngineUnavailable(
            f"not enough GPU memory for a KV cache of {max_len:,} tokens with {path.name} on "
            f"{tp} GPU(s): lower --max-model-len, use --kv-cache-dtype fp8, or add GPUs ({first})"
        )
    if any(k in low for k in _OOM):
        return EngineUnavailable(
            f"out of GPU memory loading {path.name} on {tp} GPU(s): use more GPUs, the FP8 "
            f"checkpoint, a lower --gpu-memory-utilization share for other users, or "
            f"--engine remote ({first})"
        )
    if any(k in low for k in _GPU):
        return EngineUnavailable(f"this GPU cannot run {path.name} with vLLM: {first}")
    if any(k in low for k in _ARCH):
        return EngineUnavailable(
            f"the installed vLLM cannot load {path.name} (is it a MiniMax M3 checkpoint, and "
            f"vLLM 0.33 or newer?): {first}"
        )
    if wrapped:
        return EngineUnavailable(f"vLLM failed to load {path.name}: {first}")
    return EngineUnavailable(f"vLLM failed to load {path.name}: {type(e).__name__}: {first}")


def _is(e: BaseException, name: str) -> bool:
    return any(c.__name__ == name for c in type(e).__mro__)


def _line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def request_error(e: BaseException) -> EngineError:
    """An exception out of AsyncLLM.generate() -> the EngineError the caller sees."""
    if _is(e, "VLLMClientError") or isinstance(e, ValueError | TypeError):
        return EngineRequestError(f"vLLM rejected the request: {_line(e)}")
    if _is(e, "EngineDeadError"):
        return EngineUnavailable(
            "the vLLM engine core died (its log above has the cause); restart the engine"
        )
    if _is(e, "EngineGenerateError"):
        cause = e.__cause__ or e.__context__
        if cause is None:
            return EngineError("vLLM failed the request (no cause given)")
        if _is(cause, "VLLMClientError") or isinstance(cause, ValueError | TypeError):
            return EngineRequestError(f"vLLM rejected the request: {_line(cause)}")
        return EngineError(f"vLLM failed the request: {type(cause).__name__}: {_line(cause)}")
    return EngineError(f"vLLM failed: {type(e).__name__}: {_line(e)}")
