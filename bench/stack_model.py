"""The M3-shaped stack of stack_engine.py and what its decode cases do to the engine: the
model with random weights, random K/V in every cache page, prefill steps that skip the model,
and the bytes one decode step must read. offload_e2e.py and native_long_context.py use parts.
Imported by name: the scripts put this folder on their path."""

from __future__ import annotations

import dataclasses

import torch

SHAPE = dict(
    layers=60,
    dense_layers=3,
    hidden=6144,
    heads=64,
    kv_heads=4,
    head_dim=128,
    topk_blocks=16,
    vocab=200064,
    dense_intermediate=12288,
)


def random_init(model, device: str, seed: int = 0):
    """Every weight N(0, 0.02) but the norms' (zero: M3's Gemma norms store w - 1)."""
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.zero_()
            else:
                p.normal_(0.0, 0.02, generator=g)
    return model


def build_model(shape: dict, device: str, max_pos: int, moe_experts: int = 0):
    from m3agent.engine.native.loaders.tiny import TinySpec, tiny_text_config
    from m3agent.engine.native.models.m3 import M3ForCausalLM

    spec = TinySpec(
        layers=shape["layers"],
        hidden=shape["hidden"],
        heads=shape["heads"],
        kv_heads=shape["kv_heads"],
        dense_layers=shape["dense_layers"],
        vocab=shape["vocab"],
        head_dim=shape["head_dim"],
        topk_blocks=shape["topk_blocks"],
        experts=max(1, moe_experts),
        experts_per_tok=4 if moe_experts else 1,
        intermediate=3072 if moe_experts else 256,
        dense_intermediate=shape["dense_intermediate"],
        max_position_embeddings=max_pos,
    )
    c = tiny_text_config(spec, eos_id=0, bos_id=1)
    if not moe_experts:  # every MLP dense; else layers 3.. are MoE (E experts, top-4, shared)
        c = dataclasses.replace(c, moe_layer_freq=tuple(0 for _ in range(shape["layers"])))
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    return random_init(M3ForCausalLM(c, dtype=dtype, device=device), device)


def fill_caches(caches, seed: int = 0) -> None:
    """Random K/V and index keys in every page (bf16 normals, cast to the cache dtype)."""
    g = torch.Generator(device=caches[0].kv.device).manual_seed(seed)
    for c in caches:
        for t in (c.kv, c.index):
            if t is None:
                continue
            for chunk in t.split(max(1, 2**28 // max(1, t[0].numel())), dim=0):
                chunk.copy_(
                    torch.randn(chunk.shape, generator=g, device=t.device, dtype=torch.bfloat16)
                )


def skip_prefill(engine) -> None:
    """Prefill steps return a token without running the model (the caches already hold
    random context); decode steps run the real model."""
    from m3agent.engine.native.runner.model_runner import ModelRunnerOutput

    runner = engine.runner
    inner = runner.execute_model

    def execute(out):
        if out.num_decodes < len(out.scheduled):
            return ModelRunnerOutput({r.request_id: 5 for r in out.scheduled if r.samples})
        return inner(out)

    runner.execute_model = execute


def step_bytes(model, batch: int, ctx: int, cache_elem: int) -> dict:
    """Bytes one decode step must read: every weight once (the embedding: B rows), and per
    request the dense layers' whole K/V, the MSA layers' index keys and 16 selected pages.
    Routed experts: the expected number a batch touches under uniform routing,
    E * (1 - (1 - k/E)^B), of the E experts each layer holds."""
    c = model.config
    n_exp, k_exp = c.num_local_experts, c.num_experts_per_tok
    touched = n_exp * (1 - (1 - k_exp / n_exp) ** batch) / n_exp
    w = 0
    for name, p in model.named_parameters():
        if "embed_tokens" in name:
            w += batch * p.shape[1] * p.element_size()
        elif ".experts." in name:
            w += touched * p.numel() * p.element_size()
        else:
            w += p.numel() * p.element_size()
    hkv, d = c.num_key_value_heads, c.head_dim
    di = c.sparse_attention_config.sparse_index_dim
    topk = c.sparse_attention_config.sparse_topk_blocks
    n_dense = sum(not c.is_sparse_layer(i) for i in range(c.num_hidden_layers))
    n_msa = c.num_hidden_layers - n_dense
    kv_tok = hkv * 2 * d * cache_elem
    blocks = -(-ctx // 128)
    kv = batch * (
        n_dense * ctx * kv_tok + n_msa * (ctx * di * cache_elem + min(topk, blocks) * 128 * kv_tok)
    )
    return {"weight_bytes": w, "kv_index_bytes": kv, "total_bytes": w + kv}
