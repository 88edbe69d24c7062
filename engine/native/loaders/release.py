"""Random MiniMax M3 checkpoints written as the release is laid out, at any depth and width.

For benchmarks and tests of the path a user's download takes: `config.json` of type
`minimax_m3_vl` with `text_config` (every field SPEC §1.2 lists, MTP depth included),
`vision_config` and ModelOpt's MXFP8 `quantization_config`; the routed experts in MXFP8 (e4m3
values, one e8m0 scale per 1x32 block, stored as `weight_scale_inv` as the release does),
everything else BF16 (the router and its bias in FP32); one safetensors shard per decoder layer
with `model.safetensors.index.json`; the vision tower in its own shard; the tokenizer, and the
chat template when one is given (the real one is not ours to ship).

Written tensor by tensor (one tensor in memory at a time), so a full-width MoE layer (7.5 GB)
needs no more RAM than one expert matrix; random numbers are drawn on `device` (a GPU draws a
full-width layer in well under a second). Each shard goes to a temporary name and is renamed
when complete, and `config.json` is written last: a killed writer leaves a directory the loader
refuses ("no config.json"), never one it would trust.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ...m3 import tokens as m3tokens
from ...m3.config import M3TextConfig, SparseAttentionConfig, text_config_to_dict
from ...safetensors_meta import write_streamed
from .fp8 import MX_BLOCK, quantize_mxfp8
from .tiny import write_tokenizer_for_vocab
from .vision import RELEASE_VISION, tiny_vision_config

PREFIX = "language_model."
SCALE_SUFFIX = "_scale_inv"  # w1.weight -> w1.weight_scale_inv, the release's name


@dataclass(frozen=True, slots=True)
class ReleaseSpec:
    """What to write. The defaults are the release's shapes; `moe_layers` sets the depth."""

    moe_layers: int = 1
    dense_layers: int = 3
    hidden: int = 6144
    heads: int = 64
    kv_heads: int = 4
    head_dim: int = 128
    experts: int = 128
    experts_per_tok: int = 4
    intermediate: int = 3072
    dense_intermediate: int = 12288
    vocab: int = 200064
    vision: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.moe_layers < 0 or self.dense_layers < 0 or self.moe_layers + self.dense_layers < 1:
            raise ValueError(
                "the checkpoint needs at least one layer (--moe-layers, --dense-layers)"
            )
        if self.hidden % MX_BLOCK or self.intermediate % MX_BLOCK:
            raise ValueError(f"hidden and intermediate sizes must be multiples of {MX_BLOCK}")

    @property
    def layers(self) -> int:
        return self.dense_layers + self.moe_layers


# Reduced width for the CPU (CI and smoke runs): every name, dtype and file of the release.
SMALL = ReleaseSpec(
    hidden=256, heads=4, kv_heads=2, experts=8, experts_per_tok=2, intermediate=128,
    dense_intermediate=256, vocab=512, dense_layers=1,
)  # fmt: skip
PRESETS = {"m3": ReleaseSpec(), "small": SMALL}


def text_config(s: ReleaseSpec, eos_id: int, bos_id: int) -> M3TextConfig:
    plan = (0,) * s.dense_layers + (1,) * s.moe_layers
    return M3TextConfig(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        head_dim=s.head_dim,
        intermediate_size=s.intermediate,
        dense_intermediate_size=s.dense_intermediate,
        num_local_experts=s.experts,
        num_experts_per_tok=s.experts_per_tok,
        moe_layer_freq=plan,
        sparse_attention_config=SparseAttentionConfig(
            sparse_attention_freq=plan,
            sparse_num_index_heads=s.kv_heads,
            sparse_index_dim=s.head_dim,
            sparse_disable_index_value=plan,
        ),
        eos_token_id=(eos_id,),
        bos_token_id=bos_id,
    )


# ---- the tensors of one layer, as the release names them ------------------------------------

# (name, shape, kind): kind "linear" (fan-in scaled, BF16), "norm" (Gemma offset), "router"
# and "bias" (FP32), "expert" (MXFP8), "embed".
Entry = tuple[str, tuple[int, ...], str]


def layer_entries(c: M3TextConfig, i: int) -> list[Entry]:
    h, d = c.hidden_size, c.head_dim
    p = f"model.layers.{i}."
    out: list[Entry] = [
        (p + "input_layernorm.weight", (h,), "norm"),
        (p + "post_attention_layernorm.weight", (h,), "norm"),
        (p + "self_attn.q_proj.weight", (c.num_attention_heads * d, h), "linear"),
        (p + "self_attn.k_proj.weight", (c.num_key_value_heads * d, h), "linear"),
        (p + "self_attn.v_proj.weight", (c.num_key_value_heads * d, h), "linear"),
        (p + "self_attn.o_proj.weight", (h, c.num_attention_heads * d), "linear"),
        (p + "self_attn.q_norm.weight", (d,), "norm"),
        (p + "self_attn.k_norm.weight", (d,), "norm"),
    ]
    if c.is_sparse_layer(i):
        sa = c.sparse_attention_config
        di = sa.sparse_index_dim
        out += [
            (p + "self_attn.index_q_proj.weight", (sa.sparse_num_index_heads * di, h), "linear"),
            (p + "self_attn.index_k_proj.weight", (di, h), "linear"),
            (p + "self_attn.index_q_norm.weight", (di,), "norm"),
            (p + "self_attn.index_k_norm.weight", (di,), "norm"),
        ]
    if not c.is_moe_layer(i):
        w = c.dense_intermediate_size
        return out + [
            (p + "mlp.gate_proj.weight", (w, h), "linear"),
            (p + "mlp.up_proj.weight", (w, h), "linear"),
            (p + "mlp.down_proj.weight", (h, w), "linear"),
        ]
    m, n = p + "block_sparse_moe.", c.intermediate_size
    sh = c.intermediate_size * c.n_shared_experts
    out += [
        (m + "gate.weight", (c.num_local_experts, h), "router"),
        (m + "e_score_correction_bias", (c.num_local_experts,), "bias"),
        (m + "shared_experts.gate_proj.weight", (sh, h), "linear"),
        (m + "shared_experts.up_proj.weight", (sh, h), "linear"),
        (m + "shared_experts.down_proj.weight", (h, sh), "linear"),
    ]
    for e in range(c.num_local_experts):
        q = f"{m}experts.{e}."
        out += [(q + "w1.weight", (n, h), "expert"), (q + "w3.weight", (n, h), "expert")]
        out += [(q + "w2.weight", (h, n), "expert")]
    return out


def _seed(seed: int, name: str) -> int:
    """One generator seed per tensor, so the bytes do not depend on the order of writing."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") >> 1


class _Drawer:
    """Random tensors of one kind, drawn on `device`, handed back as CPU bytes."""

    def __init__(self, seed: int, device: str) -> None:
        self.seed, self.device = seed, device
        self._pending: dict[str, torch.Tensor] = {}  # an expert's scale, drawn with its values

    def _randn(self, name: str, shape: tuple[int, ...]) -> torch.Tensor:
        g = torch.Generator(device=self.device).manual_seed(_seed(self.seed, name))
        return torch.randn(shape, generator=g, device=self.device)

    def scale(self, name: str) -> torch.Tensor:
        """The e8m0 scales of the expert matrix `name`, drawn with its values just before."""
        return self._pending.pop(name + SCALE_SUFFIX)

    def __call__(self, name: str, shape: tuple[int, ...], kind: str) -> torch.Tensor:
        if kind == "expert":
            q, scale = quantize_mxfp8(self._randn(name, shape) * shape[1] ** -0.5)
            self._pending[name + SCALE_SUFFIX] = scale.cpu()
            return q.cpu()
        t = self._randn(name, shape)
        if kind == "norm":
            t = t * 0.1
        elif kind == "bias":
            t = t * 0.01
        elif kind in ("linear", "router"):
            t = t * shape[1] ** -0.5
        return (t if kind in ("router", "bias") else t.to(torch.bfloat16)).cpu()


def _bytes(t: torch.Tensor) -> Any:
    return t.contiguous().view(torch.uint8).numpy()


def _layout(entries: list[Entry]) -> list[tuple[str, str, tuple[int, ...]]]:
    out: list[tuple[str, str, tuple[int, ...]]] = []
    for name, shape, kind in entries:
        if kind == "expert":
            out.append((PREFIX + name, "F8_E4M3", shape))
            scale = (shape[0], -(-shape[1] // MX_BLOCK))
            out.append((PREFIX + name + SCALE_SUFFIX, "U8", scale))
        else:
            out.append((PREFIX + name, "F32" if kind in ("router", "bias") else "BF16", shape))
    return out


@dataclass(frozen=True, slots=True)
class WriteProgress:
    shard: int
    shards: int
    bytes_written: int
    elapsed_s: float


def write_release(
    path: str | Path,
    spec: ReleaseSpec = ReleaseSpec(),
    *,
    device: str = "cpu",
    chat_template: Path | None = None,
    progress: Callable[[WriteProgress], None] | None = None,
) -> Path:
    """Write the checkpoint into `path` (created; an existing checkpoint there is refused)."""
    p = Path(path)
    if (p / "config.json").exists():
        raise ValueError(f"{p} already holds a checkpoint (config.json): pick an empty directory")
    if chat_template is not None and not chat_template.is_file():
        raise ValueError(f"chat template {chat_template} does not exist")
    p.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer_for_vocab(p, spec.vocab)
    c = text_config(spec, ids[m3tokens.EOS], ids[m3tokens.BOS])
    draw = _Drawer(spec.seed, device)
    groups: list[list[Entry]] = [
        [("model.embed_tokens.weight", (c.vocab_size, c.hidden_size), "embed")]
    ]
    groups += [layer_entries(c, i) for i in range(c.num_hidden_layers)]
    groups[-1] = groups[-1] + [
        ("model.norm.weight", (c.hidden_size,), "norm"),
        ("lm_head.weight", (c.vocab_size, c.hidden_size), "linear"),
    ]
    vision = _vision_tensors(spec, c) if spec.vision else {}
    shards = len(groups) + (1 if vision else 0)
    weight_map: dict[str, str] = {}
    total, t0 = 0, time.perf_counter()

    def shard_name(k: int) -> str:
        return f"model-{k + 1:05d}-of-{shards:05d}.safetensors"

    kinds = {PREFIX + n: (n, s, kind) for entries in groups for n, s, kind in entries}

    def produce(name: str) -> Any:
        if name in kinds:
            n, s, kind = kinds[name]
            return _bytes(draw(n, s, kind))
        return _bytes(draw.scale(name.removeprefix(PREFIX).removesuffix(SCALE_SUFFIX)))

    for k, entries in enumerate(groups):
        layout = _layout(entries)
        total += write_streamed(p / shard_name(k), layout, produce)
        weight_map.update(dict.fromkeys((n for n, _, _ in layout), shard_name(k)))
        if progress:
            progress(WriteProgress(k + 1, shards, total, time.perf_counter() - t0))
    if vision:
        layout = [(n, "BF16", tuple(t.shape)) for n, t in vision.items()]
        total += write_streamed(p / shard_name(shards - 1), layout, lambda n: _bytes(vision[n]))
        weight_map.update(dict.fromkeys(vision, shard_name(shards - 1)))
        if progress:
            progress(WriteProgress(shards, shards, total, time.perf_counter() - t0))
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (p / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    if chat_template is not None:
        (p / "chat_template.jinja").write_bytes(chat_template.read_bytes())
    _write_json(p / "generation_config.json", _generation_config(ids))
    _write_json(p / "config.json", _config(spec, c))  # last: it marks the checkpoint whole
    return p


def _vision_tensors(spec: ReleaseSpec, c: M3TextConfig) -> dict[str, torch.Tensor]:
    from .vision import random_vision_tensors

    return random_vision_tensors(_vision_config(spec, c), c.hidden_size, spec.seed)


def _vision_config(spec: ReleaseSpec, c: M3TextConfig) -> dict[str, Any]:
    return dict(RELEASE_VISION) if spec.hidden == ReleaseSpec().hidden else tiny_vision_config(0)


def _config(spec: ReleaseSpec, c: M3TextConfig) -> dict[str, Any]:
    text = text_config_to_dict(replace(c, num_mtp_modules=1))
    excluded = ["lm_head", "*.self_attn.*", "*.mlp.*", "*.shared_experts.*", "*.gate"]
    cfg: dict[str, Any] = {
        "architectures": ["MiniMaxM3SparseForConditionalGeneration"],
        "model_type": "minimax_m3_vl",
        "torch_dtype": "bfloat16",
        "tie_word_embeddings": False,
        "text_config": text,
        "quantization_config": {
            "quant_method": "modelopt",
            "quant_algo": "MXFP8",
            "group_size": MX_BLOCK,
            "exclude_modules": [*excluded, "vision_tower*", "multi_modal_projector*"],
        },
    }
    if spec.vision:
        cfg["vision_config"] = _vision_config(spec, c)
    return cfg


def _generation_config(ids: dict[str, int]) -> dict[str, Any]:
    return {
        "bos_token_id": ids[m3tokens.BOS],
        "eos_token_id": ids[m3tokens.EOS],
        "do_sample": True,
        "temperature": 1.0,
        "top_p": 0.95,
    }


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(obj, indent=2))
    tmp.rename(path)
