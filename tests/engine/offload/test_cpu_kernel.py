"""The compiled CPU MoE kernel against its torch reference, at small and at M3's real width."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.offload.cpu_experts import CpuExperts, HostExpertLayer
from m3agent.engine.offload.cpu_kernel import KernelLoader
from m3agent.engine.offload.plan import ExpertForm

FORMS = [ExpertForm.INT8, ExpertForm.INT4, ExpertForm.MXFP8, ExpertForm.BF16]


@pytest.fixture(scope="module")
def kernel() -> KernelLoader:
    k = KernelLoader()
    if k.module() is None:
        pytest.skip(f"no CPU kernel here: {k.status().reason}")
    return k


def random_packed(form: ExpertForm, experts: int, h: int, inter: int, seed: int) -> HostExpertLayer:
    """Random bytes straight in the tiled form (quantising 113 MB per expert through fp32 would
    dominate the test): any bytes are valid weights, scales kept in a sane range."""
    g = torch.Generator().manual_seed(seed)

    def rb(*shape, hi=256):
        return torch.randint(0, hi, shape, generator=g, dtype=torch.uint8)

    n13, n2 = 2 * inter // 16, h // 16
    if form is ExpertForm.INT8:
        s = lambda n: torch.rand(experts, n, generator=g) * 2e-4 + 1e-4  # noqa: E731
        return HostExpertLayer(
            form,
            h,
            inter,
            rb(experts, n13, h // 4, 16, 4),
            rb(experts, n2, inter // 4, 16, 4),
            s(2 * inter),
            s(h),
        )
    if form is ExpertForm.INT4:

        def s(n, k):
            return (torch.rand(experts, n, k // 128, 16, generator=g) * 2e-3 + 1e-3).bfloat16()

        m = lambda n, k: (-8 * s(n, k).float()).bfloat16()  # noqa: E731
        return HostExpertLayer(
            form,
            h,
            inter,
            rb(experts, n13, h // 8, 16, 4),
            rb(experts, n2, inter // 8, 16, 4),
            s(n13, h),
            s(n2, inter),
            m(n13, h),
            m(n2, inter),
        )
    if form is ExpertForm.MXFP8:
        v = lambda *sh: rb(*sh) & 0xF7  # noqa: E731  (no NaN codes 0x7F / 0xFF)
        e = lambda *sh: rb(*sh, hi=6) + 112  # noqa: E731  2^-15 .. 2^-10
        return HostExpertLayer(
            form,
            h,
            inter,
            v(experts, n13, h // 2, 16, 2),
            v(experts, n2, inter // 2, 16, 2),
            e(experts, n13, h // 32, 16),
            e(experts, n2, inter // 32, 16),
        )
    w = lambda *sh: (torch.randn(*sh, generator=g) * 0.02).bfloat16()  # noqa: E731
    return HostExpertLayer(
        form, h, inter, w(experts, n13, h // 2, 16, 2), w(experts, n2, inter // 2, 16, 2)
    )


def check(cpu: CpuExperts, tokens: int, h: int, experts: int, k: int, seed: int, tol: float):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, h, generator=g)
    ids = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(tokens)])
    w = torch.rand(tokens, k, generator=g)
    got, ref = cpu.forward(0, x, ids, w), cpu.reference(0, x, ids, w)
    assert got.shape == (tokens, h) and got.dtype == torch.float32
    rel = ((got - ref).norm() / ref.norm()).item()
    cos = torch.nn.functional.cosine_similarity(got.flatten(), ref.flatten(), dim=0).item()
    assert rel < tol and cos > 0.999, (rel, cos)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("tokens", [1, 2, 8, 13])  # 13: two calls of at most 8
def test_kernel_matches_reference_small(kernel, form, tokens):
    layer = random_packed(form, 6, 256, 128, seed=tokens)
    # int forms quantise activations per 32 (twice: input and SwiGLU output): ~1%
    check(CpuExperts({0: layer}, kernel=kernel), tokens, 256, 6, 3, tokens, 0.03)


@pytest.mark.slow
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("tokens", [1, 8])
def test_kernel_matches_reference_at_m3_width(kernel, form, tokens):
    layer = random_packed(form, 2, 6144, 3072, seed=7)
    check(CpuExperts({0: layer}, kernel=kernel), tokens, 6144, 2, 2, tokens, 0.03)


def test_duplicate_tokens_and_shared_experts_accumulate(kernel):
    """Two tokens routed to the same experts in another order get the same rows."""
    layer = random_packed(ExpertForm.INT8, 4, 256, 64, seed=1)
    cpu = CpuExperts({0: layer}, kernel=kernel)
    x = torch.randn(1, 256).repeat(2, 1)
    out = cpu.forward(
        0, x, torch.tensor([[0, 3], [3, 0]]), torch.tensor([[0.25, 0.75], [0.75, 0.25]])
    )
    assert torch.allclose(out[0], out[1], rtol=1e-5, atol=1e-6)
    assert out.abs().sum() > 0


def test_expert_ids_out_of_range_are_refused(kernel):
    layer = random_packed(ExpertForm.INT4, 3, 256, 128, seed=2)
    cpu = CpuExperts({0: layer}, kernel=kernel)
    with pytest.raises(ValueError, match="outside 0..2"):
        cpu.forward(0, torch.randn(1, 256), torch.tensor([[0, 3]]), torch.ones(1, 2))
