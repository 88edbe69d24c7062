"""The native engine's one front door: `LLM.from_model_dir(path)` loads a checkpoint (weights,
the tokenizer that goes with them, a VL checkpoint's vision tower) into a ready LLMEngine.

`m3agent generate`, the native chat backend (engine/backends/native.py) and through it
`m3agent serve` all start here; any load failure is one EngineUnavailable line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..api import EngineUnavailable
from .core.cache_setup import WeightsId
from .core.detokenizer import TokenizerLike
from .core.engine_config import EngineConfig
from .core.llm_engine import LLMEngine

if TYPE_CHECKING:
    from ..offload.config import OffloadConfig

DTYPES = ("float32", "bfloat16", "float16")


def torch_dtype(name: str) -> torch.dtype:
    """`--dtype`'s name -> the torch dtype; ValueError names the choices."""
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r} (try {', '.join(DTYPES)})")
    dtype = getattr(torch, name)
    assert isinstance(dtype, torch.dtype)
    return dtype


class LLM(LLMEngine):
    """An LLMEngine built from a model path (nano-vllm's `LLM`)."""

    @classmethod
    def from_model_dir(
        cls,
        path: str | Path,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        config: EngineConfig | None = None,
        need_tokenizer: bool = True,
        vision: bool = True,
        progress: Callable[[int, int], None] | None = None,
        offload: OffloadConfig | None = None,
    ) -> LLM:
        """Loads the tokenizer first (cheap, and the first thing a bad path fails), then the
        weights, then the vision tower when `vision` and the checkpoint has one.

        need_tokenizer=False: a path without a usable tokenizer still loads (token ids only).
        progress(bytes done, bytes total) while the weights load. offload: an
        offload.placement.OffloadConfig puts M3's routed experts in host memory (CPU compute);
        on CUDA it also stores the KV cache as fp8 unless `config` chose a cache dtype."""
        from .loaders.checkpoint import load_model
        from .loaders.tokenizer import load_tokenizer
        from .loaders.vision import load_vision_tower, wants_vision

        try:
            weights_dtype = torch_dtype(dtype)
        except ValueError as e:
            raise EngineUnavailable(str(e)) from None
        config = replace(config or EngineConfig(), device=device)
        if offload is not None and device.startswith("cuda") and config.kv_cache_dtype == "auto":
            # the plan's KV rows are e4m3: half the bytes, and the GPU memory the hot experts use
            config = replace(config, kv_cache_dtype="fp8")
        p = Path(path)
        try:
            tokenizer: TokenizerLike | None = None
            try:
                tokenizer = load_tokenizer(p)
            except ValueError:
                if need_tokenizer:
                    raise
            model = load_model(
                p,
                device=device,
                dtype=weights_dtype,
                max_model_len=config.max_model_len,
                progress=progress,
                offload=offload,
            )
            tower = None
            if vision and p.is_dir() and wants_vision(p):
                tower = load_vision_tower(p, dtype=weights_dtype, device=device)
            return cls(model, tokenizer, config, vision_tower=tower, weights=_weights_id(p, config))
        except (ValueError, OSError, RuntimeError, KeyError) as e:
            line = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise EngineUnavailable(f"cannot load the native model from {p}: {line}") from e


def _weights_id(path: Path, config: EngineConfig) -> WeightsId | None:
    """The checkpoint's identity for the disk tier (None: no tier, or a single-file model)."""
    if config.kv_disk_dir is None or not path.is_dir():
        return None
    from .kvstore.identity import weights_fingerprint

    return WeightsId(weights_fingerprint(path), path.resolve().name)
