"""The MiniMax M3 text decoder (MiniMaxM3SparseForCausalLM semantics, SPEC §1.3-1.6, §2.2).

Module names follow the checkpoint (`model.layers.N.self_attn.q_proj`, ...), so the loader
maps names one to one. Dense-attention and MSA layers per sparse_attention_freq, dense MLP
or MoE per moe_layer_freq; Gemma norms; per-head QK-norm before the partial RoPE.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from ...m3.config import M3TextConfig
from ..core.attention_metadata import AttentionMetadata
from ..core.model_api import LayerCache, LayerCacheSpec
from ..layers.build import Build
from ..layers.linear import Embedding, FusedLayer, FusedWeights, Linear
from ..layers.mlp import SwigluArgs, SwigluOAIMLP
from ..layers.moe import MoE
from ..layers.norm import GemmaRMSNorm
from ..layers.rope import RotaryEmbedding
from .causal_lm import CausalLM

if TYPE_CHECKING:
    from ...offload.runtime import OffloadRuntime

# the fused kernel's rope input: the cos | sin rows of this step and the row of each token
RopeRows = tuple[torch.Tensor, torch.Tensor]


class M3Attention(nn.Module, FusedLayer):
    def __init__(self, c: M3TextConfig, sparse: bool, rope: RotaryEmbedding, b: Build) -> None:
        super().__init__()
        self.sparse = sparse
        self.ops = ops = b.ops
        self.hq, self.hkv, self.d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.scale = c.head_dim**-0.5
        self.rope = [rope]  # shared, not a submodule (it has no weights)
        kw = b.placement
        h = c.hidden_size
        self.q_proj = Linear(h, self.hq * self.d, **kw)
        self.k_proj = Linear(h, self.hkv * self.d, **kw)
        self.v_proj = Linear(h, self.hkv * self.d, **kw)
        self.o_proj = Linear(self.hq * self.d, h, **kw)
        self.q_norm = GemmaRMSNorm(self.d, c.rms_norm_eps, ops=ops, **kw)
        self.k_norm = GemmaRMSNorm(self.d, c.rms_norm_eps, ops=ops, **kw)
        if sparse:
            s = c.sparse_attention_config
            self.hidx, self.di = s.sparse_num_index_heads, s.sparse_index_dim
            self.topk, self.init_blocks, self.local_blocks = (
                s.sparse_topk_blocks,
                s.sparse_init_block,
                s.sparse_local_block,
            )
            self.index_q_proj = Linear(h, self.hidx * self.di, **kw)
            self.index_k_proj = Linear(h, self.di, **kw)  # one shared index-key head
            self.index_q_norm = GemmaRMSNorm(self.di, c.rms_norm_eps, ops=ops, **kw)
            self.index_k_norm = GemmaRMSNorm(self.di, c.rms_norm_eps, ops=ops, **kw)
        self.eps = c.rms_norm_eps
        # One GEMM for q | index q | k | v | index k (the CUDA path); the checkpoint-named
        # Linears are views of its row blocks.
        parts = [self.q_proj] + ([self.index_q_proj] if sparse else []) + [self.k_proj, self.v_proj]
        self._qkv = FusedWeights(*parts, *([self.index_k_proj] if sparse else []))
        self._fused: Callable[..., None] | None = None  # chosen by finalize
        self.finalize()

    def finalize(self) -> None:
        """Keeps the fused QK-norm + RoPE + insert kernel when there is one and the
        projections are still views of the fused q|k|v|index tensor (else its GEMM would read
        stale weights); None: the per-Linear body."""
        op = self.ops.fused_qknorm_rope_insert
        self._fused = op if op is not None and self._qkv.intact() else None

    def forward(
        self,
        x: torch.Tensor,
        cache: LayerCache,
        md: AttentionMetadata,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        rope_rows: RopeRows | None = None,
    ) -> torch.Tensor:
        t = x.shape[0]
        fused = self._fused
        # host-tier layers take the unfused path: the fused op writes K/V into cache.kv in place
        if rope_rows is not None and fused is not None and cache.host is None:
            return self._forward_fused(x, cache, md, rope_rows, fused)
        rope = self.rope[0]
        cos, sin = cos_sin
        q = rope.rotate(self.q_norm(self.q_proj(x).view(t, self.hq, self.d)), cos, sin)
        k = rope.rotate(self.k_norm(self.k_proj(x).view(t, self.hkv, self.d)), cos, sin)
        v = self.v_proj(x).view(t, self.hkv, self.d)
        ops = self.ops
        if cache.host is not None:
            cache.host.insert(k, v, md.slot_mapping, ops.insert_kv)
        else:
            ops.insert_kv(k, v, cache.kv, md.slot_mapping)
        if not self.sparse:
            o = ops.dense_attention(q, cache.kv, md, self.scale)
        else:
            if cache.index is None:
                raise ValueError("an MSA layer was given no index cache")
            iq = rope.rotate(
                self.index_q_norm(self.index_q_proj(x).view(t, self.hidx, self.di)), cos, sin
            )
            ik = rope.rotate(self.index_k_norm(self.index_k_proj(x).view(t, 1, self.di)), cos, sin)
            ops.insert_index(ik[:, 0], cache.index, md.slot_mapping)
            sel = ops.index_select_blocks(
                iq, cache.index, md, self.topk, self.init_blocks, self.local_blocks
            )
            if cache.host is not None:
                o = cache.host.attend(q, sel, md, self.scale, ops.sparse_attention)
            else:
                o = ops.sparse_attention(q, cache.kv, sel, md, self.scale)
        return self.o_proj(o.reshape(t, self.hq * self.d))

    def _forward_fused(
        self,
        x: torch.Tensor,
        cache: LayerCache,
        md: AttentionMetadata,
        rope_rows: RopeRows,
        fused: Callable[..., None],
    ) -> torch.Tensor:
        """CUDA: one projection GEMM, one QK-norm + RoPE + KV / index-key insert launch
        (kernels/fused_qknorm_rope.py), then the attention kernels on strided views."""
        t = x.shape[0]
        y = self._qkv(x)
        sizes = self._qkv.splits
        views = torch.split(y, list(sizes), dim=1)
        q = views[0].view(t, self.hq, self.d)
        cs, rows = rope_rows
        if self.sparse:
            if cache.index is None:
                raise ValueError("an MSA layer was given no index cache")
            _, iq, k, v, ik = views
            iq = iq.view(t, self.hidx, self.di)
            k, v = k.view(t, self.hkv, self.d), v.view(t, self.hkv, self.d)
            # an e4m3 index cache is scored with e4m3 queries: the fused kernel writes them
            iq_out = (
                torch.empty(iq.shape, dtype=cache.index.dtype, device=iq.device)
                if cache.index.dtype == torch.float8_e4m3fn
                else None
            )
            fused(
                q,
                k,
                v,
                iq,
                ik,
                self.q_norm.weight,
                self.k_norm.weight,
                self.index_q_norm.weight,
                self.index_k_norm.weight,
                cs,
                rows,
                self.eps,
                cache.kv,
                cache.index,
                md.slot_mapping,
                iq_out,
            )
            iq = iq if iq_out is None else iq_out
            sel = self.ops.index_select_blocks(
                iq, cache.index, md, self.topk, self.init_blocks, self.local_blocks
            )
            o = self.ops.sparse_attention(q, cache.kv, sel, md, self.scale)
        else:
            _, k, v = views
            k, v = k.view(t, self.hkv, self.d), v.view(t, self.hkv, self.d)
            fused(
                q,
                k,
                v,
                None,
                None,
                self.q_norm.weight,
                self.k_norm.weight,
                None,
                None,
                cs,
                rows,
                self.eps,
                cache.kv,
                None,
                md.slot_mapping,
            )
            o = self.ops.dense_attention(q, cache.kv, md, self.scale)
        return self.o_proj(o.reshape(t, self.hq * self.d))


class M3DecoderLayer(nn.Module):
    def __init__(self, c: M3TextConfig, i: int, rope: RotaryEmbedding, b: Build) -> None:
        super().__init__()
        ops, kw = b.ops, b.placement
        self.input_layernorm = GemmaRMSNorm(c.hidden_size, c.rms_norm_eps, ops=ops, **kw)
        self.post_attention_layernorm = GemmaRMSNorm(c.hidden_size, c.rms_norm_eps, ops=ops, **kw)
        self.self_attn = M3Attention(c, c.is_sparse_layer(i), rope, b)
        act: SwigluArgs = {
            "alpha": c.swiglu_alpha,
            "limit": c.swiglu_limit,
            "beta": c.swiglu_beta,
            **kw,
        }
        self.is_moe = c.is_moe_layer(i)
        if self.is_moe:
            self.block_sparse_moe = MoE(
                c.hidden_size,
                c.intermediate_size,
                c.num_local_experts,
                c.num_experts_per_tok,
                c.n_shared_experts,
                c.routed_scaling_factor,
                c.use_routing_bias,
                experts_device=b.experts_device,
                ops=ops,
                **act,
            )
        else:
            self.mlp = SwigluOAIMLP(c.hidden_size, c.dense_intermediate_size, ops=ops, **act)

    def forward(
        self,
        h: torch.Tensor,
        residual: torch.Tensor | None,
        cache: LayerCache,
        md: AttentionMetadata,
        cos_sin: tuple[torch.Tensor, torch.Tensor],
        rope_rows: RopeRows | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x, residual = self.input_layernorm.add_forward(h, residual)
        x = self.self_attn(x, cache, md, cos_sin, rope_rows)
        x, residual = self.post_attention_layernorm.add_forward(x, residual)
        ffn = self.block_sparse_moe if self.is_moe else self.mlp
        return ffn(x), residual


class M3Model(nn.Module):
    def __init__(self, c: M3TextConfig, b: Build) -> None:
        super().__init__()
        kw = b.placement
        self.embed_tokens = Embedding(c.vocab_size, c.hidden_size, **kw)
        rope = RotaryEmbedding(c.head_dim, c.rotary_dim, c.rope_theta, c.rope_scaling)
        self.rotary_emb = rope
        self.layers = nn.ModuleList(
            M3DecoderLayer(c, i, rope, b) for i in range(c.num_hidden_layers)
        )
        self.norm = GemmaRMSNorm(c.hidden_size, c.rms_norm_eps, ops=b.ops, **kw)


class M3ForCausalLM(CausalLM[M3TextConfig]):
    architecture = "minimax_m3"
    # On CUDA nothing in a decode step needs the host (the MoE runs the grouped kernel).
    cuda_graphs = True

    def position_limit(self, config: M3TextConfig) -> int:
        return config.max_model_len

    def too_long(self, max_model_len: int, limit: int) -> str:
        return (
            f"max_model_len {max_model_len} exceeds the {limit} positions this config "
            "serves; pass a YaRN rope_scaling (e.g. {'rope_type': 'yarn', 'factor': 2.0})"
        )

    def build(self, config: M3TextConfig, b: Build) -> None:
        # engine/offload/runtime.OffloadRuntime once placement moved the routed experts to
        # host memory (the engine refreshes its hot-expert cache between requests).
        self.offload: OffloadRuntime | None = None
        self.model = M3Model(config, b)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, **b.placement)

    def place_experts(self, runtime: OffloadRuntime) -> None:
        """The build's last step when the routed experts live in host memory (offload
        placement.attach, once the weights are loaded): each MoE block becomes the runtime's
        OffloadedMoE over the same router and shared expert, then the bodies are chosen again.
        Once per model, before the first forward."""
        if self.offload is not None:
            raise RuntimeError("the routed experts of this model are placed already")
        for i, block in enumerate(self.model.layers):
            if self.config.is_moe_layer(i):
                if i not in runtime.layers:
                    raise ValueError(f"MoE layer {i} has no routed experts in host memory")
                block.block_sparse_moe = runtime.wrap(cast(MoE, block.block_sparse_moe), i)
        self.offload = runtime
        # the CPU step needs the host in the middle of a decode step: no whole-step CUDA graph
        self.info = replace(self.info, cuda_graphs=False)
        self.finalize()

    def cache_specs(self) -> list[LayerCacheSpec]:
        c = self.config
        return [
            LayerCacheSpec(
                c.num_key_value_heads,
                c.head_dim,
                c.sparse_attention_config.sparse_index_dim if c.is_sparse_layer(i) else 0,
            )
            for i in range(c.num_hidden_layers)
        ]

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        caches: list[LayerCache],
        md: AttentionMetadata,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # inputs_embeds: the token embeddings with image/video rows merged in (vision.py)
        self.check_caches(caches)
        h = self.model.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        cos_sin = self.model.rotary_emb.cos_sin(md.positions)  # once per step, not per layer
        rope_rows = None
        if caches and self.ops.fused_qknorm_rope_insert is not None:
            # the fused kernel reads cos | sin rows by index: this step's rows, row t for token t
            rope_rows = (
                torch.cat(cos_sin, dim=-1),
                torch.arange(h.shape[0], device=h.device, dtype=torch.int64),
            )
        residual = None
        for layer, cache in zip(self.model.layers, caches, strict=True):
            h, residual = layer(h, residual, cache, md, cos_sin, rope_rows)
        return self.model.norm.add_forward(h, residual)[0]

    @torch.inference_mode()
    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()
