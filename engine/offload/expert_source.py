"""One MoE layer's routed experts read from a checkpoint, for conversion into a host form.

Reads tensors by name from the safetensors files (never the whole model):
`[language_model.]model.layers.{L}.block_sparse_moe.experts.{e}.w1|w3|w2.weight` (gate, up,
down) and, for FP8 checkpoints, their `weight_scale_inv` / `weight_scale`. MXFP8 experts can
be handed over as stored (values and e8m0 scales) so the MXFP8 form copies them bit for bit;
every other case arrives as fp32.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..native.loaders.fp8 import dequantize_fp8, dequantize_mxfp8, is_mx_scale
from ..native.loaders.shards import iter_tensors, safetensors_files

_EXPERT = re.compile(
    r"(?:language_model\.)?model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight$"
)


@dataclass(frozen=True, slots=True)
class LayerExperts:
    """A layer's experts, read one at a time (a real layer is 7-29 GB: never all at once).
    `read(e)` -> (gate [I, h], up [I, h], down [h, I]): float tensors, or (e4m3, e8m0) pairs
    when `mx` (the checkpoint's MXFP8 as stored)."""

    count: int
    read: Callable[[int], tuple[Any, Any, Any]]
    mx: bool = False

    @classmethod
    def of(cls, gate: Sequence[Any], up: Sequence[Any], down: Sequence[Any]) -> LayerExperts:
        """From tensors already in memory."""
        mx = isinstance(gate[0], tuple)
        return cls(len(gate), lambda e: (gate[e], up[e], down[e]), mx)


def checkpoint_fingerprint(model_dir: Path) -> str:
    """sha256 of config.json and each safetensors file's name, size and header: changes when
    any weight is rewritten (offsets/dtypes/shapes) or the file is replaced, read in
    milliseconds (the headers only)."""
    d = Path(model_dir)
    h = hashlib.sha256()
    cfg = d / "config.json"
    if cfg.exists():
        h.update(cfg.read_bytes())
    for f in safetensors_files(d):
        size = f.stat().st_size
        with f.open("rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = fh.read(min(n, 64 << 20))
        h.update(f.name.encode() + size.to_bytes(8, "little") + header)
    return h.hexdigest()


class CheckpointExperts:
    """`source(layer) -> LayerExperts` over a checkpoint directory (the ExpertStore's input)."""

    def __init__(self, model_dir: Path, keep_mxfp8: bool = False) -> None:
        self.keep_mxfp8 = keep_mxfp8
        self._handles: dict[str, Any] = {}
        self._experts: dict[int, dict[tuple[int, str], str]] = {}
        for name, handle, _ in iter_tensors(safetensors_files(Path(model_dir))):
            self._handles[name] = handle
            m = _EXPERT.match(name)
            if m:
                self._experts.setdefault(int(m[1]), {})[(int(m[2]), m[3])] = name

    def layers(self) -> list[int]:
        return sorted(self._experts)

    def _read(self, name: str) -> Any:
        w = self._handles[name].get_tensor(name)
        if w.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
            return w.float()
        base = name[: -len("weight")]
        sname = next(
            (base + s for s in ("weight_scale_inv", "weight_scale") if base + s in self._handles),
            None,
        )
        if sname is None:
            raise ValueError(f"FP8 tensor {name} has no weight_scale_inv")
        scale = self._handles[sname].get_tensor(sname)
        if is_mx_scale(scale):
            return (w, scale) if self.keep_mxfp8 else dequantize_mxfp8(w, scale)
        return dequantize_fp8(w, scale)

    def __call__(self, layer: int) -> LayerExperts:
        names = self._experts.get(layer)
        if not names:
            raise ValueError(f"the checkpoint has no routed experts in layer {layer}")
        n = 1 + max(e for e, _ in names)
        missing = [f"{e}.{p}" for e in range(n) for p in ("w1", "w3", "w2") if (e, p) not in names]
        if missing:
            raise ValueError(f"layer {layer} lacks experts {', '.join(missing[:4])}")

        def read(e: int) -> tuple[Any, Any, Any]:
            w1, w3, w2 = (self._read(names[(e, p)]) for p in ("w1", "w3", "w2"))
            return w1, w3, w2

        mx = isinstance(read(0)[0], tuple)
        return LayerExperts(n, read, mx)
