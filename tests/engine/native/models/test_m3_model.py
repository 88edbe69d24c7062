"""The M3 decoder through the paged ops against a contiguous, loop-based reference written
from SPEC §1.3-1.6 and §2.8 (own norm, RoPE, selection, attention, MoE), plus chunking,
decode and paging invariance on a tiny random checkpoint with real sparsity (topk 2)."""

from __future__ import annotations

import math

import pytest
import torch
from m3agent.engine.native.loaders.checkpoint import load_model
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny
from safetensors.torch import load_file

BLK = 128


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, one_thread):
    path = init_tiny(
        tmp_path_factory.mktemp("m3"),
        TinySpec(
            layers=3,
            hidden=128,
            heads=4,
            kv_heads=2,
            experts=4,
            dense_layers=1,
            topk_blocks=2,
            seed=11,
        ),
    )
    w = {}
    for f in path.glob("*.safetensors"):
        w.update(
            {k.removeprefix("language_model."): v.float() for k, v in load_file(str(f)).items()}
        )
    return path, load_model(path), w


def gemma(x, w, eps=1e-6):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1 + w)


def rope(x, pos, theta=5e6, rot=64):
    out = x.clone()
    for t, p in enumerate(pos):
        for i in range(rot // 2):
            a = p * theta ** (-2 * i / rot)
            c, s = math.cos(a), math.sin(a)
            x1, x2 = x[t, :, i].clone(), x[t, :, i + rot // 2].clone()
            out[t, :, i], out[t, :, i + rot // 2] = x1 * c - x2 * s, x2 * c + x1 * s
    return out


def swiglu(x, g, u, d):
    gg = (x @ g.T).clamp(max=7.0)
    uu = (x @ u.T).clamp(-7.0, 7.0)
    return (gg * torch.sigmoid(1.702 * gg) * (uu + 1)) @ d.T


def reference_logits(w, cfg, ids):
    """Whole sequence at once, no paging, loops where the SPEC states a rule."""
    L, hq, hkv, d = len(ids), cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
    sp = cfg.sparse_attention_config
    pos = list(range(L))
    h = w["model.embed_tokens.weight"][ids].double()
    w = {k: v.double() for k, v in w.items()}
    residual = None
    for i in range(cfg.num_hidden_layers):
        pre = f"model.layers.{i}."
        residual = h if residual is None else h + residual
        x = gemma(residual, w[pre + "input_layernorm.weight"])
        a = pre + "self_attn."
        q = rope(gemma((x @ w[a + "q_proj.weight"].T).view(L, hq, d), w[a + "q_norm.weight"]), pos)
        k = rope(gemma((x @ w[a + "k_proj.weight"].T).view(L, hkv, d), w[a + "k_norm.weight"]), pos)
        v = (x @ w[a + "v_proj.weight"].T).view(L, hkv, d)
        sel = None
        if cfg.is_sparse_layer(i):
            iq = rope(
                gemma(
                    (x @ w[a + "index_q_proj.weight"].T).view(L, hkv, d),
                    w[a + "index_q_norm.weight"],
                ),
                pos,
            )
            ik = rope(
                gemma(
                    (x @ w[a + "index_k_proj.weight"].T).view(L, 1, d), w[a + "index_k_norm.weight"]
                ),
                pos,
            )[:, 0]
            sel = {}
            for t in range(L):
                n = t // BLK + 1
                for g in range(hkv):
                    s = [
                        max(
                            float(iq[t, g] @ ik[j])
                            for j in range(b * BLK, min(b * BLK + BLK, t + 1))
                        )
                        for b in range(n)
                    ]
                    forced = set(range(min(sp.sparse_init_block, n))) | set(
                        range(max(0, n - sp.sparse_local_block), n)
                    )
                    free = sorted((b for b in range(n) if b not in forced), key=lambda b: -s[b])
                    sel[t, g] = forced | set(free[: min(sp.sparse_topk_blocks, n) - len(forced)])
        o = torch.zeros(L, hq, d, dtype=torch.float64)
        for t in range(L):
            for qh in range(hq):
                g = qh // (hq // hkv)
                keys = [j for j in range(t + 1) if sel is None or j // BLK in sel[t, g]]
                sc = torch.stack([q[t, qh] @ k[j, g] for j in keys]) / math.sqrt(d)
                o[t, qh] = torch.softmax(sc, 0) @ v[keys, g]
        x = o.view(L, hq * d) @ w[a + "o_proj.weight"].T
        residual = x + residual
        x = gemma(residual, w[pre + "post_attention_layernorm.weight"])
        if cfg.is_moe_layer(i):
            m = pre + "block_sparse_moe."
            out = torch.zeros_like(x)
            for t in range(L):
                s = torch.sigmoid(w[m + "gate.weight"] @ x[t])
                top = torch.topk(
                    s + w[m + "e_score_correction_bias"], cfg.num_experts_per_tok
                ).indices.tolist()
                ws = s[top] / s[top].sum() * cfg.routed_scaling_factor
                for wi, e in zip(ws, top, strict=True):
                    ex = f"{m}experts.{e}."
                    out[t] += wi * swiglu(
                        x[t], w[ex + "w1.weight"], w[ex + "w3.weight"], w[ex + "w2.weight"]
                    )
            sh = m + "shared_experts."
            h = out + swiglu(
                x, w[sh + "gate_proj.weight"], w[sh + "up_proj.weight"], w[sh + "down_proj.weight"]
            )
        else:
            mp = pre + "mlp."
            h = swiglu(
                x, w[mp + "gate_proj.weight"], w[mp + "up_proj.weight"], w[mp + "down_proj.weight"]
            )
    final = gemma(h + residual, w["model.norm.weight"])
    return (final @ w["lm_head.weight"].T).float()


def test_paged_m3_matches_contiguous_reference(tiny, paged):
    _path, model, w = tiny
    ids = torch.randint(0, 512, (300,), generator=torch.Generator().manual_seed(1)).tolist()
    want = reference_logits(w, model.config, ids)
    got = paged.run_prompt(model, ids, splits=[200, 100], fill=1e3)
    err = (got - want).abs().max().item()
    print("max abs err vs reference", err, "max logit", want.abs().max().item())
    assert err < 1e-4 * want.abs().max().item()
    assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_sparsity_changes_late_tokens_only(tiny, paged):
    """topk 2: tokens < 256 see every block (MSA == dense); later ones drop a block."""
    path, model, _w = tiny
    dense = load_model(path)
    for layer in dense.model.layers:
        if layer.self_attn.sparse:
            layer.self_attn.topk = 16
    ids = torch.randint(0, 512, (400,), generator=torch.Generator().manual_seed(2)).tolist()
    a = paged.run_prompt(model, ids)
    b = paged.run_prompt(dense, ids)
    assert (a[:256] - b[:256]).abs().max().item() < 1e-4
    assert (a[256:] - b[256:]).abs().max().item() > 1e-3


def test_chunking_decode_and_paging_invariance(tiny, paged):
    _path, model, _w = tiny
    ids = torch.randint(0, 512, (290,), generator=torch.Generator().manual_seed(3)).tolist()
    whole = paged.run_prompt(model, ids)
    for splits in ([128, 128, 34], [1000 % 290, 290 - 1000 % 290], [250] + [1] * 40):
        got = paged.run_prompt(
            model, ids, splits=splits, fill=-5e3, gen=torch.Generator().manual_seed(len(splits))
        )
        assert (got - whole).abs().max().item() < 1e-4, splits


def test_bf16_runs_and_stays_close(tiny, paged):
    path, model, _w = tiny
    m16 = load_model(path, dtype=torch.bfloat16)
    assert m16.model.layers[1].block_sparse_moe.gate.weight.dtype == torch.float32
    ids = list(range(100, 260))
    a = paged.run_prompt(model, ids)
    b = paged.run_prompt(m16, ids)
    assert b.dtype == torch.float32 and torch.isfinite(b).all()
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() > 0.8
