"""Layers against hand computations: Gemma norm, partial NeoX RoPE, YaRN, SwiGLU-OAI, router."""

from __future__ import annotations

import math

import torch
from m3agent.engine.m3.config import RopeScaling
from m3agent.engine.native.layers.mlp import swiglu_oai, swiglu_oai_merged
from m3agent.engine.native.layers.moe import MoE
from m3agent.engine.native.layers.norm import GemmaRMSNorm, RMSNorm
from m3agent.engine.native.layers.rope import RotaryEmbedding
from m3agent.engine.native.layers.router import route


def test_gemma_norm_hand_values():
    n = GemmaRMSNorm(2, eps=0.0)
    n.weight.data = torch.tensor([0.0, 1.0])  # stored as offsets from 1: scales (1, 2)
    x = torch.tensor([[3.0, 4.0]])  # mean square 12.5
    r = 1 / math.sqrt(12.5)
    assert torch.allclose(n(x), torch.tensor([[3 * r * 1, 4 * r * 2]]))
    # computed in fp32 even for bf16 input, returned in bf16
    xb = torch.tensor([[300.0, 400.0]], dtype=torch.bfloat16)
    y = n(xb)
    assert y.dtype == torch.bfloat16
    assert torch.allclose(y.float(), torch.tensor([[3 * r, 8 * r]]), atol=1e-2)


def test_llama_norm_scales_by_weight_not_one_plus():
    n = RMSNorm(2, eps=0.0)
    n.weight.data = torch.tensor([0.5, 2.0])
    r = 1 / math.sqrt(12.5)
    assert torch.allclose(n(torch.tensor([[3.0, 4.0]])), torch.tensor([[1.5 * r, 8 * r]]))


def test_partial_rope_layout():
    """Only dims 0..63 rotate; dim i pairs with i+32 (NeoX half split, not interleaved)."""
    theta = 5e6
    rope = RotaryEmbedding(128, 64, theta)
    x = torch.randn(3, 2, 128)
    pos = torch.tensor([0, 1, 1000])
    (y,) = rope(pos, x)
    assert torch.equal(y[0], x[0])  # position 0: identity
    assert torch.equal(y[..., 64:], x[..., 64:])  # the unrotated half passes through
    for t, p in enumerate(pos.tolist()):
        for i in (0, 5, 31):
            ang = p * theta ** (-2 * i / 64)
            c, s = math.cos(ang), math.sin(ang)
            x1, x2 = x[t, :, i], x[t, :, i + 32]
            assert torch.allclose(y[t, :, i], x1 * c - x2 * s, atol=1e-5)
            assert torch.allclose(y[t, :, i + 32], x2 * c + x1 * s, atol=1e-5)


def test_yarn_up_to_1m_positions_is_finite_and_keeps_high_frequencies():
    rs = RopeScaling(factor=2.0, original_max_position_embeddings=524288)
    plain = RotaryEmbedding(128, 64, 5e6)
    yarn = RotaryEmbedding(128, 64, 5e6, rs)
    pos = torch.tensor([0, 1, 524287, 524288, 999_999, 1_048_575])
    cos, sin = yarn.cos_sin(pos)
    assert torch.isfinite(cos).all() and torch.isfinite(sin).all()
    m = 0.1 * math.log(2.0) + 1  # YaRN attention factor
    assert abs(yarn.mscale - m) < 1e-12
    assert torch.allclose(cos**2 + sin**2, torch.full_like(cos, m * m), atol=1e-5)
    # the fastest dims keep their trained frequency, the slowest are interpolated by 1/factor
    assert math.isclose(yarn.inv_freq[0].item(), plain.inv_freq[0].item())
    assert math.isclose(yarn.inv_freq[-1].item(), plain.inv_freq[-1].item() / 2, rel_tol=1e-9)
    x = torch.randn(6, 4, 128)
    (y,) = yarn(pos, x)
    assert torch.isfinite(y).all()


def test_swiglu_oai_hand_values():
    g = torch.tensor([1.0, 10.0, -10.0, 0.5])
    u = torch.tensor([0.5, 10.0, -10.0, -9.0])

    def ref(gv, uv):
        gv = min(gv, 7.0)  # gate clamped from above only
        uv = max(min(uv, 7.0), -7.0)
        return gv / (1 + math.exp(-1.702 * gv)) * (uv + 1)

    want = torch.tensor([ref(a, b) for a, b in zip(g.tolist(), u.tolist(), strict=True)])
    assert torch.allclose(swiglu_oai(g, u), want, atol=1e-6)
    # merged layout is [all gates | all ups], not interleaved
    assert torch.allclose(swiglu_oai_merged(torch.cat([g, u])), want, atol=1e-6)


def test_router_bias_selects_but_does_not_weight():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    bias = torch.tensor([0.0, 0.0, 5.0, 0.0])  # pushes expert 2 into the top 2
    w, ids = route(logits, bias, top_k=2, scaling=2.0)
    assert set(ids[0].tolist()) == {0, 2}
    s0, s2 = 1 / (1 + math.exp(-2.0)), 1 / (1 + math.exp(0.0))
    by_id = dict(zip(ids[0].tolist(), w[0].tolist(), strict=True))
    assert math.isclose(by_id[0], 2.0 * s0 / (s0 + s2), rel_tol=1e-6)
    assert math.isclose(by_id[2], 2.0 * s2 / (s0 + s2), rel_tol=1e-6)
    assert math.isclose(sum(by_id.values()), 2.0, rel_tol=1e-6)


def test_moe_block_equals_hand_sum():
    torch.manual_seed(0)
    moe = MoE(
        8,
        4,
        num_experts=3,
        top_k=2,
        n_shared=1,
        routed_scaling_factor=2.0,
        use_bias=True,
        alpha=1.702,
        limit=7.0,
        beta=1.0,
        dtype=torch.float32,
    )
    for p in moe.parameters():
        p.data.normal_()
    x = torch.randn(5, 8)
    out = moe(x)

    def expert(m, x, names):
        g, u, d = (getattr(m, n).weight for n in names)
        return swiglu_oai(x @ g.T, x @ u.T) @ d.T

    for t in range(5):
        s = torch.sigmoid(moe.gate.weight @ x[t])
        top = torch.topk(s + moe.e_score_correction_bias, 2).indices.tolist()
        w = s[top] / s[top].sum() * 2.0
        want = sum(
            w[i] * expert(moe.experts[e], x[t], ("w1", "w3", "w2")) for i, e in enumerate(top)
        )
        want = want + expert(moe.shared_experts, x[t], ("gate_proj", "up_proj", "down_proj"))
        assert torch.allclose(out[t], want, atol=1e-4)


def test_yarn_matches_transformers():
    """inv_freq and attention factor equal HF's YaRN for M3's partial rotary (64 of 128)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import _compute_yarn_parameters

    for factor, beta_fast in ((2.0, 32.0), (4.0, 16.0)):
        cfg = LlamaConfig(
            hidden_size=8192,
            num_attention_heads=64,
            head_dim=128,
            max_position_embeddings=int(524288 * factor),
            rope_parameters={
                "rope_type": "yarn",
                "factor": factor,
                "rope_theta": 5e6,
                "beta_fast": beta_fast,
                "original_max_position_embeddings": 524288,
                "partial_rotary_factor": 0.5,
            },
        )
        inv, att = _compute_yarn_parameters(cfg)
        ours = RotaryEmbedding(
            128,
            64,
            5e6,
            RopeScaling(
                factor=factor, beta_fast=beta_fast, original_max_position_embeddings=524288
            ),
        )
        assert torch.allclose(ours.inv_freq.float(), inv.float(), rtol=1e-6, atol=0)
        assert math.isclose(ours.mscale, att, rel_tol=1e-12)
