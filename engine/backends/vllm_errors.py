"""vLLM load failures -> one EngineUnavailable line a user can act on.

vLLM reports the same few causes through many exception types (torch.OutOfMemoryError,
RuntimeError from a worker, ValueError from the KV-cache check), so the message is matched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from m3agent.engine.api import EngineUnavailable

_OOM = ("out of memory", "outofmemory", "cuda error: out of memory")
_KV = ("max seq len", "kv cache is needed", "larger than the maximum number of tokens",
       "not enough kv cache", "no available memory for the cache blocks")
_GPU = ("no cuda gpus", "not supported on", "unsupported gpu", "compute capability",
        "no kernel image", "sm_", "cuda driver", "found no nvidia driver")
_ARCH = ("model architectures", "not supported for now", "unrecognized configuration")


def load_error(e: BaseException, path: Path, plan: Any) -> EngineUnavailable:
    text = str(e) or type(e).__name__
    low = f"{type(e).__name__}: {text}".lower()
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
    return EngineUnavailable(f"vLLM failed to load {path.name}: {type(e).__name__}: {first}")
