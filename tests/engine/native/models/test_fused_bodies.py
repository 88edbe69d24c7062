"""Fused or per-Linear bodies are chosen once, by `finalize` (build, load, `.to()`), never by a
forward: a forward asks no pointer check, and a parameter replaced after the choice changes it
only when `finalize` runs again."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from m3agent.engine.native.layers import build as build_mod
from m3agent.engine.native.layers.linear import FusedLayer, FusedWeights
from m3agent.engine.native.layers.mlp import SwigluOAIMLP, swiglu_oai, swiglu_oai_merged
from m3agent.engine.native.layers.moe import MoE, routed_sum
from m3agent.engine.native.layers.op_table import CPU_OPS
from m3agent.engine.native.loaders.tiny import TinySpec, tiny_text_config
from m3agent.engine.native.models.m3 import M3Attention, M3ForCausalLM
from torch import nn

ACT = {"alpha": 1.702, "limit": 7.0, "beta": 1.0}


def grouped_reference(x, w13, w2, w, ids, alpha, limit, beta):
    """The grouped kernel's semantics over the stacked weights (a CPU stand-in)."""

    def expert(e: int, xs: torch.Tensor) -> torch.Tensor:
        return swiglu_oai_merged(xs @ w13[e].T, alpha, limit, beta) @ w2[e].T

    return routed_sum(x, ids, w, expert)


def qknorm_rope_insert(*args, **kwargs) -> None:
    raise AssertionError("only chosen here, never run")


FUSED = dataclasses.replace(
    CPU_OPS,
    swiglu_oai_merged=swiglu_oai_merged,
    grouped_moe=grouped_reference,
    fused_qknorm_rope_insert=qknorm_rope_insert,
)


def refuse_pointer_checks(monkeypatch) -> None:
    """Any pointer check from here on fails the test."""

    def refuse(self):
        raise AssertionError("a forward asked intact()")

    monkeypatch.setattr(FusedWeights, "intact", refuse)
    monkeypatch.setattr(MoE, "_stacked_intact", refuse)


def filled(module: nn.Module, seed: int = 0) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)  # in place: the views stay
    return module


def test_mlp_chooses_the_merged_body_once(monkeypatch):
    mlp = filled(SwigluOAIMLP(16, 8, ops=FUSED, dtype=torch.float32, **ACT))
    refuse_pointer_checks(monkeypatch)
    assert mlp._merged is swiglu_oai_merged  # chosen at build
    x = torch.randn(5, 16)
    g, u, d = mlp.projections()
    want = d(swiglu_oai(g(x), u(x), **ACT))
    assert torch.allclose(mlp(x), want, atol=1e-6)  # no intact() on the way


def test_mlp_replaced_parameter_takes_the_per_linear_body_on_finalize(monkeypatch):
    mlp = filled(SwigluOAIMLP(16, 8, ops=FUSED, dtype=torch.float32, **ACT))
    calls = []
    real = FusedWeights.intact
    monkeypatch.setattr(FusedWeights, "intact", lambda self: calls.append(1) or real(self))
    mlp.gate_proj.weight = nn.Parameter(torch.randn(8, 16), requires_grad=False)
    x = torch.randn(3, 16)
    mlp(x)
    assert calls == [] and mlp._merged is not None  # the old choice stands until finalize
    mlp.finalize()
    assert calls == [1] and mlp._merged is None
    g, u, d = mlp.projections()
    assert torch.allclose(mlp(x), d(swiglu_oai(g(x), u(x), **ACT)), atol=1e-6)


def moe(ops=FUSED) -> MoE:
    return filled(MoE(16, 8, 4, 2, 1, 2.5, True, ops=ops, dtype=torch.float32, **ACT))


def test_moe_chooses_the_grouped_body_once(monkeypatch):
    fused = moe()
    assert fused._grouped is grouped_reference
    assert all(ex._merged is not None for ex in fused.experts)  # views of the stack
    loop = moe(CPU_OPS)
    loop.load_state_dict(fused.state_dict())
    assert loop._grouped is None
    refuse_pointer_checks(monkeypatch)
    x = torch.randn(6, 16)
    assert torch.allclose(fused(x), loop(x), atol=1e-5)


def test_moe_replaced_expert_weight_leaves_the_stack_on_finalize():
    m = moe()
    m.experts[0].w1.weight = nn.Parameter(torch.zeros(8, 16), requires_grad=False)
    assert m._grouped is not None  # not re-decided by a forward
    m.finalize()
    assert m._grouped is None  # the grouped kernel would read the stale stack


def tiny_m3() -> M3ForCausalLM:
    spec = TinySpec(layers=2, hidden=64, heads=2, kv_heads=1, head_dim=32, experts=4)
    spec = dataclasses.replace(spec, dense_layers=1, intermediate=32, dense_intermediate=64)
    return M3ForCausalLM(tiny_text_config(spec, 1, 2), dtype=torch.float32)


def choices(model: nn.Module) -> list[object]:
    out: list[object] = []
    for m in model.modules():
        if isinstance(m, SwigluOAIMLP):
            out.append(m._merged)
        elif isinstance(m, MoE):
            out.append(m._grouped)
        elif isinstance(m, M3Attention):
            out.append(m._fused)
    return out


def test_model_build_and_to_choose_the_bodies(monkeypatch):
    monkeypatch.setattr(build_mod, "resolve_ops", lambda device, dtype: FUSED)
    model = tiny_m3()
    assert any(isinstance(m, FusedLayer) for m in model.modules())
    assert all(c is not None for c in choices(model))  # fresh build: every fused body
    model.to(torch.float64)  # each parameter gets storage of its own
    assert all(c is None for c in choices(model))  # _apply chose the per-Linear bodies


def test_place_experts_is_a_single_build_step():
    model = tiny_m3()
    model.offload = object()  # type: ignore[assignment]  # as after a first placement
    with pytest.raises(RuntimeError, match="placed already"):
        model.place_experts(object())  # type: ignore[arg-type]
