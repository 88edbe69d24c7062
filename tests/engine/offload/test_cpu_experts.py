"""The CPU expert path against the native engine's own MoE module and its fp32 reference."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.layers.moe import MoE
from m3agent.engine.native.layers.router import route
from m3agent.engine.offload.cpu_experts import CpuExperts, HostExpertLayer, quantize_rows_int8
from m3agent.engine.offload.plan import ExpertForm

H, INTER, E, K = 256, 128, 8, 3


def make_moe(seed: int = 0) -> MoE:
    torch.manual_seed(seed)
    moe = MoE(
        H,
        INTER,
        E,
        K,
        n_shared=0,
        routed_scaling_factor=2.0,
        use_bias=True,
        alpha=1.702,
        limit=7.0,
        beta=1.0,
        dtype=torch.bfloat16,
    )
    with torch.no_grad():
        for p in moe.parameters():
            p.copy_(torch.randn_like(p, dtype=torch.float32) * 0.08)
    return moe


def host_layer(moe: MoE, form: ExpertForm) -> HostExpertLayer:
    """The engine MoE's experts in a host form (int4 in groups of 64: H=128 rows of k)."""
    return HostExpertLayer.from_weights(
        [ex.w1.weight.float() for ex in moe.experts],
        [ex.w3.weight.float() for ex in moe.experts],
        [ex.w2.weight.float() for ex in moe.experts],
        form,
        group=64,
    )


def routed(moe: MoE, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logits = torch.nn.functional.linear(x.float(), moe.gate.weight)
    return route(logits, moe.e_score_correction_bias, K, moe.scaling)


@pytest.mark.parametrize("tokens", [1, 7])
def test_bf16_host_experts_equal_the_engine_moe(tokens):
    moe = make_moe()
    x = (torch.randn(tokens, H) * 2).to(torch.bfloat16)
    w, ids = routed(moe, x)
    cpu = CpuExperts({5: host_layer(moe, ExpertForm.BF16)})
    got = cpu.forward(5, x, ids, w)
    want = moe(x).float()  # no shared expert: the MoE output is the routed sum
    assert (got - want).norm() / want.norm() < 1e-2  # both round activations to bf16
    ref = cpu.reference(5, x, ids, w)
    assert (got - ref).abs().max() / ref.abs().max() < 2e-2


@pytest.mark.parametrize(
    ("form", "vs_engine", "vs_reference"),
    [(ExpertForm.INT8, 0.03, 0.02), (ExpertForm.MXFP8, 0.06, 0.01), (ExpertForm.INT4, 0.2, 0.02)],
)
@pytest.mark.parametrize("use_kernel", [True, False])
def test_quantised_host_experts_within_their_error(form, vs_engine, vs_reference, use_kernel):
    moe = make_moe(1)
    x = (torch.randn(5, H) * 2).to(torch.bfloat16)
    w, ids = routed(moe, x)
    cpu = CpuExperts({0: host_layer(moe, form)}, use_kernel=use_kernel)
    if use_kernel and not cpu.uses_kernel:
        pytest.skip("no CPU kernel on this machine (see cpu_kernel.py)")
    got = cpu.forward(0, x, ids, w)
    want = moe(x).float()
    rel = (got - want).norm() / want.norm()
    assert rel < vs_engine, rel
    # Against the fp32 reference on the same quantised weights the gap is only the rounding of
    # activations (int8 per 32 in the kernel, bf16 in the torch path): far tighter.
    ref = cpu.reference(0, x, ids, w)
    assert (got - ref).norm() / ref.norm() < vs_reference


def test_int8_rows_and_sizes():
    w = torch.randn(64, 96)
    q, s = quantize_rows_int8(w)
    assert q.dtype == torch.int8 and s.shape == (64,)
    assert ((q.float() * s.float()[:, None] - w).abs() <= s.float()[:, None] * 0.51 + 1e-6).all()
    moe = make_moe()
    layer = host_layer(moe, ExpertForm.INT8)
    assert layer.expert_bytes() == 3 * H * INTER + 4 * (2 * INTER + H)  # fp32 row scales
    int4 = host_layer(moe, ExpertForm.INT4)
    weights = 3 * H * INTER
    assert int4.expert_bytes() == weights // 2 + 4 * (weights // 64)  # bf16 scale + min / 64
    mx = host_layer(moe, ExpertForm.MXFP8)
    assert mx.expert_bytes() == weights + weights // 32
    with pytest.raises(ValueError, match="int8, int4, mxfp8 or bf16"):
        HostExpertLayer.from_weights([], [], [], ExpertForm.STORED)


@pytest.mark.parametrize("rows", [2, 256])
def test_mxfp8_to_int8_in_row_blocks_is_the_float_path_bit_for_bit(monkeypatch, rows):
    """The conversion cache's MXFP8 -> int8 path (a block of rows at a time, in place) gives the
    bytes quantising the dequantised fp32 matrices gives: weights, scales, tiling, the gate/up
    interleave; with blocks that split the rows unevenly too. Scales span 2^-12..2^2."""
    from m3agent.engine.native.loaders.fp8 import dequantize_mxfp8, quantize_mxfp8
    from m3agent.engine.offload import forms
    from m3agent.engine.offload.cpu_experts import pack_expert, pack_mxfp8_expert_int8
    from m3agent.engine.offload.plan import ExpertForm

    monkeypatch.setattr(forms, "_MX_ROWS", 48 if rows == 2 else rows)
    gen = torch.Generator().manual_seed(rows)

    def mx(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        spread = torch.exp2(torch.randint(-12, 3, (n, 1), generator=gen).float())
        return quantize_mxfp8(torch.randn(n, k, generator=gen) * spread)

    gate, up, down = mx(64, 96), mx(64, 96), mx(96, 64)
    want = pack_expert(ExpertForm.INT8, *(dequantize_mxfp8(*w) for w in (gate, up, down)), 128)
    got = pack_mxfp8_expert_int8(gate, up, down)
    for a, b in zip(want, got, strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[n], b[n]) for n in a)
