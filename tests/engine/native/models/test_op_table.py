"""The op table a model resolves once when it is built: the CPU path on the CPU
(test_cpu_attention.py), the torch references for float32 models on CUDA, the Triton ops for a half-precision model on CUDA, M3AGENT_TORCH_OPS
keeping named ops on the reference; every layer of a model shares its model's table."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.layers import attention, msa, router
from m3agent.engine.native.layers.op_table import CPU_OPS, OP_NAMES, TORCH_REFERENCE, resolve_ops
from m3agent.engine.native.loaders.tiny import TinySpec, tiny_text_config
from m3agent.engine.native.models.m3 import M3ForCausalLM


def test_float32_on_cuda_takes_the_references():
    assert resolve_ops("cuda", torch.float32, torch_ops="") is TORCH_REFERENCE
    ref = TORCH_REFERENCE
    assert ref.insert_kv is attention.insert_kv and ref.dense_attention is attention.dense_attention
    assert ref.index_select_blocks is msa.index_select_blocks and ref.route is router.route
    assert ref.add_rmsnorm is ref.grouped_moe is ref.fused_qknorm_rope_insert is None


def test_half_precision_on_cuda_takes_the_kernels_but_the_forced_ones():
    ops = pytest.importorskip("m3agent.engine.native.kernels.ops")  # needs triton, not a GPU
    table = resolve_ops("cuda:0", torch.bfloat16, torch_ops="")
    assert all(getattr(table, n) is getattr(ops, n) for n in OP_NAMES)
    kept = resolve_ops("cuda", torch.bfloat16, torch_ops="grouped_moe,dense_attention")
    assert kept.grouped_moe is None and kept.dense_attention is attention.dense_attention
    assert kept.sparse_attention is ops.sparse_attention
    assert resolve_ops("cuda", torch.float16, torch_ops="all") == TORCH_REFERENCE


def test_the_environment_is_read_when_the_table_is_resolved(monkeypatch):
    pytest.importorskip("m3agent.engine.native.kernels.ops")
    monkeypatch.setenv("M3AGENT_TORCH_OPS", "route")
    assert resolve_ops("cuda", torch.bfloat16).route is router.route
    monkeypatch.setenv("M3AGENT_TORCH_OPS", "all")
    assert resolve_ops("cuda", torch.bfloat16) == TORCH_REFERENCE


def test_a_model_hands_its_one_table_to_every_layer():
    c = tiny_text_config(TinySpec(layers=2, hidden=64, experts=2, dense_layers=1), 0, 1)
    model = M3ForCausalLM(c)
    assert model.ops is CPU_OPS  # built on the CPU
    holders = [m for m in model.modules() if hasattr(m, "ops")]
    assert len(holders) > 10 and all(m.ops is model.ops for m in holders)
