"""The loader over the expert cache: a released-layout checkpoint's experts are converted on
the first load, memory-mapped on the next, equal to the in-memory conversion, and a cache the
disk cannot hold is refused before anything is written."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from m3agent.engine.native.loaders.checkpoint import load_model
from m3agent.engine.native.loaders.release import SMALL, write_release
from m3agent.engine.offload import expert_cache, forms
from m3agent.engine.offload.config import OffloadConfig
from m3agent.engine.offload.device_experts import tensor_fields
from m3agent.engine.offload.plan import ExpertForm


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = replace(SMALL, moe_layers=2, dense_layers=1, vision=False)
    return write_release(tmp_path_factory.mktemp("m3") / "ckpt", spec)


def _fields(model) -> dict[tuple[int, str], torch.Tensor]:
    """Each expert's projections as the fp32 weights its host form stands for."""
    out = {}
    for i, layer in model.offload.layers.items():
        t = tensor_fields(layer)
        for e in range(t["w13"].shape[0]):
            for p in ("13", "2"):
                packed = {k[0]: v[e] for k, v in t.items() if k.endswith(p)}
                out[(i, e, p)] = forms.dequantize(packed, layer.form.value)
    return out


@pytest.mark.parametrize("form", [ExpertForm.INT8, ExpertForm.MXFP8])
def test_converted_once_then_mapped_and_equal_to_in_memory(ckpt, tmp_path, capfd, form):
    base = OffloadConfig(form=form, cpu_kernel=False)
    in_memory = _fields(load_model(ckpt, offload=base))
    cached = replace(base, cache_dir=tmp_path / "experts")
    first = _fields(load_model(ckpt, offload=cached))
    assert "converting experts: layer 2/2" in capfd.readouterr().err
    files = sorted((tmp_path / "experts").rglob("layer_*.bin"))
    assert [f.name for f in files] == ["layer_001.bin", "layer_002.bin"]
    stamps = [f.stat().st_mtime_ns for f in files]
    again = _fields(load_model(ckpt, offload=cached))
    assert "converting experts" not in capfd.readouterr().err  # mapped, not converted
    assert [f.stat().st_mtime_ns for f in files] == stamps
    assert in_memory.keys() == first.keys() == again.keys()
    for k in in_memory:
        assert torch.equal(in_memory[k], first[k]) and torch.equal(first[k], again[k]), k


def test_a_disk_too_small_is_refused_before_writing(ckpt, tmp_path, monkeypatch):
    class Tiny:
        free = 1_000_000

    monkeypatch.setattr(expert_cache.shutil, "disk_usage", lambda _p: Tiny())
    cfg = OffloadConfig(form=ExpertForm.INT8, cpu_kernel=False, cache_dir=tmp_path / "x")
    with pytest.raises(ValueError, match=r"the expert cache needs .* GB for 2 layer\(s\)"):
        load_model(ckpt, offload=cfg)
    assert not list((tmp_path / "x").rglob("*.bin*"))
