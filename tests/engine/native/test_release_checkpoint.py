"""The released-layout checkpoint writer (engine/native/loaders/release.py), read back by the
loaders exactly as a download would be: names, dtypes, shards, config fields, and the values."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from m3agent.engine.native.loaders.checkpoint import load_model
from m3agent.engine.native.loaders.fp8 import dequantize_mxfp8
from m3agent.engine.native.loaders.release import SMALL, WriteProgress, write_release
from m3agent.engine.native.loaders.vision import load_vision_tower
from m3agent.engine.offload.expert_source import CheckpointExperts
from m3agent.engine.offload.inventory import StorageFormat, detect_format
from m3agent.engine.safetensors_meta import read_header

SPEC = replace(SMALL, moe_layers=1, dense_layers=1)
EXPERT = "language_model.model.layers.1.block_sparse_moe.experts.3.w2.weight"


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_release(tmp_path_factory.mktemp("m3") / "ckpt", SPEC)


def _headers(d: Path) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update({k: {**v, "file": f.name} for k, v in read_header(f).items()})
    return out


def test_layout_is_the_release_one(ckpt: Path) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    assert cfg["model_type"] == "minimax_m3_vl"
    assert cfg["architectures"] == ["MiniMaxM3SparseForConditionalGeneration"]
    text = cfg["text_config"]
    assert text["num_mtp_modules"] == 1 and text["moe_layer_freq"] == [0, 1]
    assert text["sparse_attention_config"]["sparse_attention_freq"] == [0, 1]
    assert cfg["quantization_config"]["quant_algo"] == "MXFP8"
    assert detect_format(cfg) is StorageFormat.MXFP8
    assert "vision_config" in cfg and (ckpt / "tokenizer.json").is_file()
    headers = _headers(ckpt)
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())["weight_map"]
    assert index == {k: v["file"] for k, v in headers.items()}
    # experts MXFP8 with e8m0 bytes per 1x32; router FP32; everything else of the text BF16
    assert headers[EXPERT]["dtype"] == "F8_E4M3"
    scale = headers[EXPERT + "_scale_inv"]
    assert scale["dtype"] == "U8" and scale["shape"] == [SPEC.hidden, SPEC.intermediate // 32]
    gate = "language_model.model.layers.1.block_sparse_moe.gate.weight"
    assert headers[gate]["dtype"] == "F32"
    assert headers["language_model.model.layers.0.mlp.up_proj.weight"]["dtype"] == "BF16"
    assert headers["language_model.lm_head.weight"]["shape"] == [SPEC.vocab, SPEC.hidden]
    # one shard per layer (embeddings first, the vision tower last), nothing half-written
    assert len({v["file"] for v in headers.values()}) == SPEC.layers + 2
    assert not list(ckpt.glob("*.partial"))


def test_the_loaders_read_it_as_written(ckpt: Path) -> None:
    from safetensors import safe_open

    model = load_model(ckpt)
    shard = json.loads((ckpt / "model.safetensors.index.json").read_text())["weight_map"][EXPERT]
    with safe_open(str(ckpt / shard), framework="pt") as f:
        want = dequantize_mxfp8(f.get_tensor(EXPERT), f.get_tensor(EXPERT + "_scale_inv"))
    got = dict(model.named_parameters())[EXPERT.removeprefix("language_model.")]
    torch.testing.assert_close(got.float(), want, rtol=0, atol=0)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        hidden = model.model.embed_tokens(ids)
    assert torch.isfinite(hidden).all()
    # the offload path reads the stored e4m3 values and e8m0 scales bit for bit
    experts = CheckpointExperts(ckpt, keep_mxfp8=True)(1)
    _gate, _up, (values, e8m0) = experts.read(3)
    assert values.dtype == torch.float8_e4m3fn and e8m0.shape == (
        SPEC.hidden,
        SPEC.intermediate // 32,
    )
    assert load_vision_tower(ckpt) is not None


def test_same_seed_same_bytes_and_a_killed_write_is_refused(tmp_path: Path) -> None:
    small = replace(SPEC, vision=False)
    a = write_release(tmp_path / "a", small)
    b = write_release(tmp_path / "b", small)
    for f in sorted(a.glob("*.safetensors")):
        assert f.read_bytes() == (b / f.name).read_bytes()

    def die_after_two(p: WriteProgress) -> None:
        if p.shard == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_release(tmp_path / "cut", small, progress=die_after_two)
    assert not (tmp_path / "cut" / "config.json").exists()
    with pytest.raises(ValueError, match="config.json"):
        load_model(tmp_path / "cut")
    with pytest.raises(ValueError, match="already holds a checkpoint"):
        write_release(a, small)


def test_cli_answers_bad_input_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    cli = Path(sys.executable).parent / "m3agent"
    r = subprocess.run(
        [str(cli), "model", "init-release", str(tmp_path / "x"), "--width", "huge"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --width must be one of m3, small, got 'huge'"
