"""Experts read from a real (tiny) checkpoint on disk, MXFP8 kept as stored, and the fingerprint."""

from __future__ import annotations

import torch
from m3agent.engine.native.loaders.fp8 import dequantize_mxfp8
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny
from m3agent.engine.offload.cpu_experts import CpuExperts
from m3agent.engine.offload.expert_cache import ExpertStore
from m3agent.engine.offload.expert_source import CheckpointExperts, checkpoint_fingerprint
from m3agent.engine.offload.plan import ExpertForm
from safetensors import safe_open


def test_mxfp8_checkpoint_experts_cached_bit_for_bit(tmp_path):
    d = init_tiny(tmp_path / "m", TinySpec(layers=3, dense_layers=1, mxfp8=True, experts=4))
    src = CheckpointExperts(d, keep_mxfp8=True)
    assert src.layers() == [1, 2]
    layer = src(2)
    assert layer.count == 4 and layer.mx
    layers = ExpertStore.open(
        tmp_path / "cache", checkpoint_fingerprint(d), ExpertForm.MXFP8, [1, 2], src, progress=None
    )
    w13, w2 = layers[2].dense(3)
    # the same tensors straight from the file, dequantised by the engine's loader
    name = "language_model.model.layers.2.block_sparse_moe.experts.3.{}.weight"
    files = sorted(d.glob("*.safetensors"))

    def stored(n: str) -> torch.Tensor:
        for f in files:
            with safe_open(str(f), framework="pt") as h:
                if n in h.keys():
                    return h.get_tensor(n)
        raise KeyError(n)

    deq = {
        p: dequantize_mxfp8(
            stored(name.format(p)), stored(name.format(p)[: -len("weight")] + "weight_scale_inv")
        )
        for p in ("w1", "w3", "w2")
    }
    assert torch.equal(w13, torch.cat([deq["w1"], deq["w3"]]))
    assert torch.equal(w2, deq["w2"])
    x = torch.randn(3, w2.shape[0])
    ids = torch.tensor([[0, 3], [1, 2], [3, 1]])
    w = torch.full((3, 2), 0.5)
    cpu = CpuExperts(layers)
    ref = cpu.reference(2, x, ids, w)
    assert (cpu.forward(2, x, ids, w) - ref).norm() / ref.norm() < 0.01


def test_bf16_checkpoint_to_int4_and_fingerprint_changes(tmp_path):
    d = init_tiny(tmp_path / "m", TinySpec(layers=2, dense_layers=1, experts=4))
    src = CheckpointExperts(d)
    fp = checkpoint_fingerprint(d)
    layers = ExpertStore.open(tmp_path / "cache", fp, ExpertForm.INT4, [1], src, progress=None)
    w13, _ = layers[1].dense(0)
    gate = src(1).read(0)[0]
    assert (w13[: gate.shape[0]] - gate).norm() / gate.norm() < 0.15  # int4 of random weights
    assert checkpoint_fingerprint(d) == fp
    (d / "config.json").write_text((d / "config.json").read_text().replace("}", ', "x": 1}', 1))
    assert checkpoint_fingerprint(d) != fp
