"""Our M3 checkpoint layout -> transformers' own MiniMax M3 (`models.minimax_m3_vl`).

A test helper for the parity test: the config and the weights of a checkpoint written by
`engine.native.loaders.tiny.init_tiny` (vLLM's names, `language_model.model.layers.N...`), converted
to transformers' `MiniMaxM3VLForCausalLM`:

* `self_attn.index_{q,k}_{proj,norm}` -> `self_attn.indexer.{q,k}_{proj,norm}`;
* `block_sparse_moe.*` -> `mlp.*`; the router's `e_score_correction_bias` moves under `gate`;
* gate/up projections are concatenated (`[gate; up]`, not interleaved), experts stacked into
  `[E, 2I, H]` / `[E, H, I]`.

transformers' limits, which the checkpoint must respect (checked here): no init block, the
SwiGLU `beta` fixed at 1, exactly one shared expert (sized by `shared_intermediate_size`), the
router in the model dtype (fp32 in the test, as vLLM keeps it).
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from m3agent.engine.m3.config import M3TextConfig

PREFIX = "language_model."


def hf_text_config(c: M3TextConfig):
    """The `MiniMaxM3VLTextConfig` for our text config (ValueError outside transformers' limits)."""
    from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import (
        MiniMaxM3VLTextConfig,
    )

    s = c.sparse_attention_config
    if s.sparse_init_block != 0:
        raise ValueError("transformers' M3 has no init block (sparse_init_block must be 0)")
    if c.swiglu_beta != 1.0:
        raise ValueError("transformers' M3 fixes the SwiGLU beta at 1")
    if any(c.is_moe_layer(i) for i in range(c.num_hidden_layers)) and c.n_shared_experts != 1:
        raise ValueError("transformers' M3 has exactly one shared expert")
    if c.rope_scaling is not None:
        raise ValueError("the parity checkpoint uses plain RoPE")
    n = c.num_hidden_layers
    return MiniMaxM3VLTextConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=n,
        num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads,
        head_dim=c.head_dim,
        max_position_embeddings=c.max_position_embeddings,
        rms_norm_eps=c.rms_norm_eps,
        bos_token_id=c.bos_token_id,
        eos_token_id=list(c.eos_token_id) or None,
        tie_word_embeddings=c.tie_word_embeddings,
        num_experts_per_tok=c.num_experts_per_tok,
        num_local_experts=c.num_local_experts,
        dense_intermediate_size=c.dense_intermediate_size,
        shared_intermediate_size=c.intermediate_size * c.n_shared_experts,
        routed_scaling_factor=c.routed_scaling_factor,
        rotary_dim=c.rotary_dim,
        swiglu_alpha=c.swiglu_alpha,
        swiglu_limit=c.swiglu_limit,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": c.rope_theta,
            "partial_rotary_factor": c.partial_rotary_factor,
        },
        layer_types=[
            "minimax_m3_sparse" if c.is_sparse_layer(i) else "full_attention" for i in range(n)
        ],
        mlp_layer_types=["sparse" if c.is_moe_layer(i) else "dense" for i in range(n)],
        index_n_heads=s.sparse_num_index_heads,
        index_head_dim=s.sparse_index_dim,
        index_block_size=s.sparse_block_size,
        index_topk_blocks=s.sparse_topk_blocks,
        index_local_blocks=s.sparse_local_block,
    )


_INDEX = re.compile(r"\.self_attn\.index_(q|k)_(proj|norm)\.")
_EXPERT = re.compile(
    r"^(model\.layers\.\d+)\.block_sparse_moe\.experts\.(\d+)\.(w1|w2|w3)\.weight$"
)
_GATED = re.compile(r"^(.*)\.(gate_proj|up_proj)\.weight$")


def hf_state_dict(tensors: dict[str, torch.Tensor], num_experts: int) -> dict[str, torch.Tensor]:
    """Checkpoint tensors (our names, with or without `language_model.`) -> transformers names."""
    out: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    gated: dict[str, dict[str, torch.Tensor]] = {}
    for name, t in tensors.items():
        name = name.removeprefix(PREFIX)
        if (m := _EXPERT.match(name)) is not None:
            experts.setdefault(m[1], {}).setdefault(int(m[2]), {})[m[3]] = t
            continue
        name = _INDEX.sub(r".self_attn.indexer.\1_\2.", name)
        name = name.replace(
            ".block_sparse_moe.e_score_correction_bias", ".mlp.gate.e_score_correction_bias"
        )
        name = name.replace(".block_sparse_moe.", ".mlp.")
        if (m := _GATED.match(name)) is not None:
            gated.setdefault(m[1], {})[m[2]] = t
            continue
        out[name] = t
    for prefix, parts in gated.items():
        out[f"{prefix}.gate_up_proj.weight"] = torch.cat([parts["gate_proj"], parts["up_proj"]], 0)
    for layer, by_id in experts.items():
        if sorted(by_id) != list(range(num_experts)):
            raise ValueError(f"{layer}: experts {sorted(by_id)} of {num_experts}")
        ordered = [by_id[e] for e in range(num_experts)]
        out[f"{layer}.mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([w["w1"], w["w3"]], 0) for w in ordered]
        )
        out[f"{layer}.mlp.experts.down_proj"] = torch.stack([w["w2"] for w in ordered])
    return out


def load_hf_model(model_dir: Path, c: M3TextConfig, dtype: torch.dtype = torch.float32):
    """transformers' MiniMaxM3VLForCausalLM holding the checkpoint's weights (strict load)."""
    from safetensors.torch import load_file
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLForCausalLM

    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        tensors.update(load_file(str(f)))
    cfg = hf_text_config(c)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)  # the random init is overwritten below; keep it deterministic anyway
    model = MiniMaxM3VLForCausalLM(cfg).to(dtype).eval()
    state = {k: v.to(dtype) for k, v in hf_state_dict(tensors, c.num_local_experts).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"weight names do not match: missing {missing}, unexpected {unexpected}")
    return model
