"""The converted-expert cache: built with progress, reopened memory-mapped, torn files rebuilt."""

from __future__ import annotations

import json

import pytest
import torch
from m3agent.engine.offload.cpu_experts import CpuExperts
from m3agent.engine.offload.expert_cache import ExpertStore
from m3agent.engine.offload.expert_source import LayerExperts
from m3agent.engine.offload.plan import ExpertForm

from .offload_helpers import random_expert_weights

H, INTER, E = 128, 64, 4


def experts(seed: int) -> LayerExperts:
    return LayerExperts.of(*random_expert_weights(E, H, INTER, seed, 0.05))


class CountingSource:
    """A real source of weights that records which layers it was asked to convert."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, layer: int) -> LayerExperts:
        self.calls.append(layer)
        return experts(layer)


@pytest.mark.parametrize(
    "form", [ExpertForm.INT8, ExpertForm.INT4, ExpertForm.MXFP8, ExpertForm.BF16]
)
def test_built_once_then_memory_mapped(tmp_path, form):
    src, lines = CountingSource(), []
    layers = ExpertStore.open(
        tmp_path, "abc123", form, [3, 5], src, group=64, progress=lines.append
    )
    assert src.calls == [3, 5]
    assert [p.layers_done for p in lines] == [1, 2] and lines[-1].layers_total == 2
    assert lines[-1].bytes_written == sum(
        (
            tmp_path
            / f"abc123-{form.value}{'-g64' if form is ExpertForm.INT4 else ''}"
            / f"layer_00{i}.bin"
        )
        .stat()
        .st_size
        for i in (3, 5)
    )
    again = ExpertStore.open(tmp_path, "abc123", form, [3, 5], src, group=64, progress=lines.append)
    assert src.calls == [3, 5] and len(lines) == 2  # nothing converted the second time
    x = torch.randn(2, H)
    ids = torch.tensor([[0, 2], [1, 3]])
    w = torch.tensor([[0.7, 0.3], [0.5, 0.5]])
    built, mapped = CpuExperts(layers, use_kernel=False), CpuExperts(again, use_kernel=False)
    assert torch.equal(built.forward(5, x, ids, w), mapped.forward(5, x, ids, w))
    # the mapping really is the file: its bytes equal the file's
    meta = json.loads(next((tmp_path).glob("*/layer_005.json")).read_text())
    raw = next((tmp_path).glob("*/layer_005.bin")).read_bytes()
    w13 = next(t for t in meta["tensors"] if t["name"] == "w13")
    assert raw[: w13["nbytes"]] == again[5].w13.reshape(-1).view(torch.uint8).numpy().tobytes()


def test_torn_or_foreign_cache_is_rebuilt(tmp_path):
    src = CountingSource()
    ExpertStore.open(tmp_path, "fp1", ExpertForm.INT8, [0, 1, 2], src, progress=None)
    d = next(tmp_path.iterdir())
    # layer 0: truncated file; layer 1: torn JSON; layer 2: a byte overwritten near the end
    b0 = d / "layer_000.bin"
    b0.write_bytes(b0.read_bytes()[:-100])
    (d / "layer_001.json").write_text('{"version": 1, "finger')
    b2 = d / "layer_002.bin"
    data = bytearray(b2.read_bytes())
    data[-10] ^= 0xFF
    b2.write_bytes(bytes(data))
    src.calls.clear()
    layers = ExpertStore.open(tmp_path, "fp1", ExpertForm.INT8, [0, 1, 2], src, progress=None)
    assert src.calls == [0, 1, 2]
    fresh = ExpertStore.open(
        tmp_path / "other", "fp1", ExpertForm.INT8, [2], CountingSource(), progress=None
    )
    assert torch.equal(layers[2].w13, fresh[2].w13)
    # a leftover temporary file from a crash is ignored, and another fingerprint or form is
    # another directory
    (d / "layer_000.bin.tmp-999").write_bytes(b"partial")
    src.calls.clear()
    ExpertStore.open(tmp_path, "fp1", ExpertForm.INT8, [0], src, progress=None)
    ExpertStore.open(tmp_path, "fp2", ExpertForm.INT8, [0], src, progress=None)
    ExpertStore.open(tmp_path, "fp1", ExpertForm.INT4, [0], src, group=64, progress=None)
    assert src.calls == [0, 0]


def test_stderr_progress_lines(tmp_path, capfd):
    ExpertStore.open(tmp_path, "fp", ExpertForm.BF16, [7, 8], CountingSource())
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "layer 2/2" in err[-1] and "GB" in err[-1]
