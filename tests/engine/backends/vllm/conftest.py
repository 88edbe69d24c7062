"""Fixtures: the fake vllm package on sys.path, and M3-shaped checkpoint directories whose
weight shards are sparse files of the real checkpoint sizes (no disk is used)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import fake_vllm  # noqa: E402

GB = 10**9


@pytest.fixture
def vllm(tmp_path):
    root = tmp_path / "site"
    fake_vllm.install(root)
    import vllm as module

    yield module.FAKE
    fake_vllm.uninstall(root)


def make_checkpoint(
    path: Path,
    *,
    weight_bytes: int,
    fp8: bool = False,
    vision: bool = True,
    shards: int = 4,
    rope_scaling: dict | None = None,
    missing_shards: int = 0,
) -> Path:
    from m3agent.engine.m3.tokenizer import write_tokenizer_files

    path.mkdir(parents=True, exist_ok=True)
    text = {
        "num_key_value_heads": 4,
        "num_local_experts": 128,
        "max_position_embeddings": 524288,
        "num_hidden_layers": 60,
    }
    if rope_scaling:
        text["rope_scaling"] = rope_scaling
    cfg: dict = {
        "architectures": ["MiniMaxM3SparseForConditionalGeneration"],
        "model_type": "minimax_m3_vl",
        "torch_dtype": "bfloat16",
        "text_config": text,
    }
    if vision:
        cfg["vision_config"] = {"hidden_size": 1280}
    if fp8:
        cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3"}
    (path / "config.json").write_text(json.dumps(cfg))
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    index = {"weight_map": {f"layer.{i}.weight": n for i, n in enumerate(names)}}
    (path / "model.safetensors.index.json").write_text(json.dumps(index))
    for n in names[: shards - missing_shards]:
        with open(path / n, "wb") as f:
            os.truncate(f.fileno(), weight_bytes // shards)  # sparse: sized, not written
    write_tokenizer_files(path)
    return path


@pytest.fixture
def checkpoint(tmp_path):
    def make(name: str = "m3", **kw) -> Path:
        return make_checkpoint(tmp_path / name, **kw)

    return make
