"""What an M3 checkpoint weighs, by part, without loading a tensor.

Two sources give the same `Inventory`: the safetensors headers of a checkpoint directory (exact
bytes as stored, scales included), or the config alone with an assumed storage format (to plan
before the weights are downloaded). The placement planner decides from it what lives on the GPU
and what in host memory. Reads JSON only: no torch, so `m3agent model plan` runs anywhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from math import ceil, prod
from pathlib import Path
from typing import Any

from ..json_file import read_json_object
from ..m3.config import M3TextConfig, parse_config
from ..safetensors_meta import read_header

DTYPE_BYTES = {
    "F64": 8,
    "F32": 4,
    "I32": 4,
    "BF16": 2,
    "F16": 2,
    "I16": 2,
    "I64": 8,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "U8": 1,
    "I8": 1,
    "BOOL": 1,
}
FP8_BLOCK = 128  # 128x128 block scales (the released FP8 checkpoints)
MX_BLOCK = 32  # MXFP8: one e8m0 scale per 1x32 block of a row


class StorageFormat(StrEnum):
    BF16 = "bf16"
    FP8 = "fp8"  # e4m3, fp32 scale per 128x128 block
    MXFP8 = "mxfp8"  # e4m3, e8m0 scale per 1x32 block (ModelOpt)


class Part(StrEnum):
    ROUTED_EXPERTS = "routed_experts"
    SHARED_EXPERTS = "shared_experts"
    ROUTER = "router"
    ATTENTION = "attention"  # q/k/v/o, the MSA indexer projections, QK norms
    DENSE_MLP = "dense_mlp"
    EMBEDDINGS = "embeddings"
    LM_HEAD = "lm_head"
    NORMS = "norms"
    VISION = "vision"
    MTP = "mtp"


@dataclass(frozen=True, slots=True)
class Inventory:
    """Bytes per part as stored, and the routed experts per MoE layer."""

    fmt: StorageFormat
    parts: dict[Part, int]
    # layer index -> (number of routed experts, bytes of one expert as stored, scales included)
    experts: dict[int, tuple[int, int]] = field(default_factory=dict)
    source: str = "config"

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def expert_params(self, c: M3TextConfig) -> int:
        """Weights (not bytes) of one routed expert: gate, up, down."""
        return 3 * c.hidden_size * c.intermediate_size


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_EXPERT = re.compile(r"\.experts\.(\d+)\.")


def classify(name: str) -> Part:
    """A checkpoint tensor name (HF M3 layout, VL prefixes allowed) -> the part it belongs to."""
    if ".mtp." in f".{name}" or name.startswith("mtp."):
        return Part.MTP
    if any(k in name for k in ("vision_tower", "multi_modal_projector", "patch_merge", "visual.")):
        return Part.VISION
    if "shared_experts" in name or "shared_expert." in name:
        return Part.SHARED_EXPERTS
    if ".experts." in name:
        return Part.ROUTED_EXPERTS
    if name.endswith(
        ("block_sparse_moe.gate.weight", "e_score_correction_bias", "mlp.gate.weight")
    ):
        return Part.ROUTER
    if "embed_tokens" in name:
        return Part.EMBEDDINGS
    if name.startswith(("lm_head", "language_model.lm_head")):
        return Part.LM_HEAD
    if ".self_attn." in name:
        return Part.ATTENTION
    if ".mlp." in name:
        return Part.DENSE_MLP
    return Part.NORMS


def _tensors(model_dir: Path) -> Iterator[tuple[str, int]]:
    files = sorted(model_dir.glob("*.safetensors"))
    for f in files:
        for name, meta in read_header(f).items():
            dtype = meta.get("dtype")
            if dtype not in DTYPE_BYTES:
                raise ValueError(f"{f.name}: tensor {name} has unknown dtype {dtype!r}")
            yield name, prod(meta["shape"]) * DTYPE_BYTES[dtype]


def detect_format(cfg: dict[str, Any]) -> StorageFormat:
    q = cfg.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower()
    algo = str(q.get("quant_algo", "")).lower()
    if "mxfp8" in (method, algo) or method == "modelopt" and "mx" in algo:
        return StorageFormat.MXFP8
    if method == "fp8":
        return StorageFormat.FP8
    return StorageFormat.BF16


def from_checkpoint(model_dir: str | Path) -> tuple[M3TextConfig, Inventory]:
    """Exact stored bytes from the safetensors headers (config alone when there are none)."""
    d = Path(model_dir)
    cfg_path = d / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"{d} has no config.json: not a checkpoint directory")
    raw = read_json_object(cfg_path)
    c = parse_config(raw).text_config
    fmt = detect_format(raw)
    if not any(d.glob("*.safetensors")):
        return c, from_config(c, fmt)
    parts = dict.fromkeys(Part, 0)
    per_expert: dict[tuple[int, int], int] = {}
    for name, nbytes in _tensors(d):
        part = classify(name)
        parts[part] += nbytes
        if part is Part.ROUTED_EXPERTS:
            layer, expert = _LAYER.search(name), _EXPERT.search(name)
            if layer is None or expert is None:
                raise ValueError(f"expert tensor {name} names no layer or expert index")
            key = (int(layer.group(1)), int(expert.group(1)))
            per_expert[key] = per_expert.get(key, 0) + nbytes
    experts: dict[int, tuple[int, int]] = {}
    for (layer_no, _), nbytes in sorted(per_expert.items()):
        n, size = experts.get(layer_no, (0, 0))
        experts[layer_no] = (n + 1, max(size, nbytes))
    return c, Inventory(fmt=fmt, parts=parts, experts=experts, source="safetensors")


def matrix_bytes(rows: int, cols: int, fmt: StorageFormat) -> int:
    """One stored 2-D weight with its scales."""
    if fmt is StorageFormat.BF16:
        return rows * cols * 2
    if fmt is StorageFormat.FP8:
        return rows * cols + ceil(rows / FP8_BLOCK) * ceil(cols / FP8_BLOCK) * 4
    return rows * cols + rows * ceil(cols / MX_BLOCK)


def from_config(c: M3TextConfig, fmt: StorageFormat) -> Inventory:
    """The same figures from the config alone, as `init-tiny` and the released checkpoints
    store them: projections in `fmt`, router fp32, norms and embeddings bf16."""
    h, hd = c.hidden_size, c.head_dim
    sp = c.sparse_attention_config
    parts = dict.fromkeys(Part, 0)
    experts: dict[int, tuple[int, int]] = {}

    def mat(rows: int, cols: int) -> int:
        return matrix_bytes(rows, cols, fmt)

    for i in range(c.num_hidden_layers):
        q, kv = c.num_attention_heads * hd, c.num_key_value_heads * hd
        attn = mat(q, h) + 2 * mat(kv, h) + mat(h, q) + 2 * hd * 2  # + q/k norms
        if c.is_sparse_layer(i):
            idx_q = sp.sparse_num_index_heads * sp.sparse_index_dim
            attn += mat(idx_q, h) + mat(sp.sparse_index_dim, h) + 2 * sp.sparse_index_dim * 2
        parts[Part.ATTENTION] += attn
        parts[Part.NORMS] += 2 * h * 2
        if c.is_moe_layer(i):
            inter = c.intermediate_size
            one = 2 * mat(inter, h) + mat(h, inter)
            experts[i] = (c.num_local_experts, one)
            parts[Part.ROUTED_EXPERTS] += c.num_local_experts * one
            shared = inter * c.n_shared_experts
            parts[Part.SHARED_EXPERTS] += 2 * mat(shared, h) + mat(h, shared)
            parts[Part.ROUTER] += c.num_local_experts * h * 4 + c.num_local_experts * 4
        else:
            inter = c.dense_intermediate_size
            parts[Part.DENSE_MLP] += 2 * mat(inter, h) + mat(h, inter)
    parts[Part.NORMS] += h * 2
    parts[Part.EMBEDDINGS] += c.vocab_size * h * 2
    if not c.tie_word_embeddings:
        parts[Part.LM_HEAD] += c.vocab_size * h * 2
    return Inventory(fmt=fmt, parts=parts, experts=experts, source="config")
