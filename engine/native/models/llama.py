"""A Llama-style decoder (RMSNorm, full NeoX RoPE, GQA, SiLU MLP, tied or untied head)
through the same NativeModel protocol and paged attention ops as M3. It exists so the engine
machinery can be checked against real weights (SmolLM2) and HF transformers.

Module names follow HF Llama (`model.layers.N.self_attn.q_proj`, ...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..core.attention_metadata import AttentionMetadata
from ..core.model_api import LayerCache, LayerCacheSpec
from ..layers.build import Build
from ..layers.linear import Embedding, Linear
from ..layers.mlp import SiluMLP
from ..layers.norm import RMSNorm
from ..layers.rope import RotaryEmbedding
from .causal_lm import CausalLM


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = False
    eos_token_id: tuple[int, ...] = ()
    bos_token_id: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(
                    f"llama config: {name} must be positive, got {getattr(self, name)}"
                )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"llama config: num_attention_heads ({self.num_attention_heads}) "
                f"is not a multiple of num_key_value_heads "
                f"({self.num_key_value_heads})"
            )

    @staticmethod
    def from_hf(d: dict[str, Any]) -> LlamaConfig:
        heads = int(d["num_attention_heads"])
        rp = d.get("rope_scaling") or d.get("rope_parameters") or {}
        if rp.get("rope_type", rp.get("type", "default")) not in ("default", None):
            raise ValueError(
                f"llama config: rope scaling {rp.get('rope_type', rp.get('type'))!r}"
                " is not supported by the native Llama model"
            )
        eos = d.get("eos_token_id")
        return LlamaConfig(
            vocab_size=int(d["vocab_size"]),
            hidden_size=int(d["hidden_size"]),
            intermediate_size=int(d["intermediate_size"]),
            num_hidden_layers=int(d["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(d.get("num_key_value_heads") or heads),
            head_dim=int(d.get("head_dim") or int(d["hidden_size"]) // heads),
            max_position_embeddings=int(d.get("max_position_embeddings", 2048)),
            # transformers >= 5 nests rope_theta in rope_parameters
            rope_theta=float(
                d.get("rope_theta") or (d.get("rope_parameters") or {}).get("rope_theta") or 10000.0
            ),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-5)),
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            eos_token_id=() if eos is None else tuple(eos) if isinstance(eos, list) else (eos,),
            bos_token_id=d.get("bos_token_id"),
        )


class LlamaAttention(nn.Module):
    def __init__(self, c: LlamaConfig, rope: RotaryEmbedding, b: Build) -> None:
        super().__init__()
        self.ops = b.ops
        self.hq, self.hkv, self.d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.scale = c.head_dim**-0.5
        self.rope = [rope]
        kw = b.placement
        self.q_proj = Linear(c.hidden_size, self.hq * self.d, **kw)
        self.k_proj = Linear(c.hidden_size, self.hkv * self.d, **kw)
        self.v_proj = Linear(c.hidden_size, self.hkv * self.d, **kw)
        self.o_proj = Linear(self.hq * self.d, c.hidden_size, **kw)

    def forward(
        self,
        x: torch.Tensor,
        cache: LayerCache,
        md: AttentionMetadata,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        t = x.shape[0]
        rope = self.rope[0]
        q = rope.rotate(self.q_proj(x).view(t, self.hq, self.d), *cos_sin)
        k = rope.rotate(self.k_proj(x).view(t, self.hkv, self.d), *cos_sin)
        v = self.v_proj(x).view(t, self.hkv, self.d)
        self.ops.insert_kv(k, v, cache.kv, md.slot_mapping)
        o = self.ops.dense_attention(q, cache.kv, md, self.scale)
        return self.o_proj(o.reshape(t, self.hq * self.d))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig, rope: RotaryEmbedding, b: Build) -> None:
        super().__init__()
        kw = b.placement
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, **kw)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps, **kw)
        self.self_attn = LlamaAttention(c, rope, b)
        self.mlp = SiluMLP(c.hidden_size, c.intermediate_size, **kw)

    def forward(
        self,
        h: torch.Tensor,
        cache: LayerCache,
        md: AttentionMetadata,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), cache, md, cos_sin)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaModel(nn.Module):
    def __init__(self, c: LlamaConfig, b: Build) -> None:
        super().__init__()
        self.embed_tokens = Embedding(c.vocab_size, c.hidden_size, **b.placement)
        self.rotary_emb = RotaryEmbedding(c.head_dim, c.head_dim, c.rope_theta)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(c, self.rotary_emb, b) for _ in range(c.num_hidden_layers)
        )
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps, **b.placement)


class LlamaForCausalLM(CausalLM[LlamaConfig]):
    architecture = "llama"

    def position_limit(self, config: LlamaConfig) -> int:
        return config.max_position_embeddings

    def too_long(self, max_model_len: int, limit: int) -> str:
        return f"max_model_len {max_model_len} exceeds the model's max_position_embeddings {limit}"

    def build(self, config: LlamaConfig, b: Build) -> None:
        self.offload: None = None  # NativeModel.offload: every weight is the model's own
        self.model = LlamaModel(config, b)
        if not config.tie_word_embeddings:
            self.lm_head = Linear(config.hidden_size, config.vocab_size, **b.placement)

    def cache_specs(self) -> list[LayerCacheSpec]:
        c = self.config
        return [LayerCacheSpec(c.num_key_value_heads, c.head_dim)] * c.num_hidden_layers

    @torch.inference_mode()
    def forward(
        self, input_ids: torch.Tensor, caches: list[LayerCache], md: AttentionMetadata
    ) -> torch.Tensor:
        self.check_caches(caches)
        h = self.model.embed_tokens(input_ids)
        cos_sin = self.model.rotary_emb.cos_sin(md.positions)  # once per step, not per layer
        for layer, cache in zip(self.model.layers, caches, strict=True):
            h = layer(h, cache, md, cos_sin)
        return self.model.norm(h)

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        w = (
            self.model.embed_tokens.weight
            if self.config.tie_word_embeddings
            else self.lm_head.weight
        )
        return torch.nn.functional.linear(hidden.to(w.dtype), w).float()
