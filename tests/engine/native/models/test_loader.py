"""Safetensors loading: tiny checkpoints round-trip, VL/text layouts, FP8, clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from m3agent.app.cli import build_app
from m3agent.engine.native.loaders.checkpoint import load_model
from m3agent.engine.native.loaders.fp8 import (
    dequantize_fp8,
    dequantize_mxfp8,
    quantize_fp8,
    quantize_mxfp8,
)
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny
from m3agent.engine.native.models.m3 import M3ForCausalLM
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return init_tiny(tmp_path_factory.mktemp("tiny"), TinySpec(layers=3, seed=1))


def _copy(src, dst):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_init_tiny_cli_is_deterministic_and_loads(tmp_path):
    args = [sys.executable, "-m", "m3agent.app.cli", "model", "init-tiny"]
    opts = ["--layers", "2", "--hidden", "128", "--experts", "3", "--vocab", "300", "--seed", "5"]
    r = subprocess.run(args + [str(tmp_path / "a")] + opts, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    runner = CliRunner()
    r = runner.invoke(build_app(), ["model", "init-tiny", str(tmp_path / "b")] + opts)
    assert r.exit_code == 0, r.output
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "model.safetensors.index.json",
    } <= set(files)
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["model_type"] == "minimax_m3_vl" and cfg["text_config"]["num_hidden_layers"] == 2
    m = load_model(tmp_path / "a")
    assert isinstance(m, M3ForCausalLM) and m.info.vocab_size == 300
    assert [s.index_dim for s in m.cache_specs()] == [0, 128]
    keys = load_file(str(tmp_path / "a" / "model-00001-of-00002.safetensors"))
    assert all(
        k.startswith("language_model.model.") or k == "language_model.lm_head.weight" for k in keys
    )
    r = runner.invoke(build_app(), ["model", "info", str(tmp_path / "a"), "--json"])
    info = json.loads(r.stdout)
    assert info["architecture"] == "minimax_m3" and info["layers"] == 2
    assert info["params"] == sum(p.numel() for p in m.parameters())


def test_cli_errors_are_one_line(tmp_path):
    r = CliRunner().invoke(build_app(), ["model", "info", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = CliRunner().invoke(
        build_app(), ["model", "init-tiny", str(tmp_path / "x"), "--vocab", "100"]
    )
    assert r.exit_code == 2 and "--vocab 100 is too small" in r.output


def test_tokenizer_has_m3_special_tokens(tiny):
    from m3agent.engine.m3 import tokens
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tiny / "tokenizer.json"))
    for t in tokens.ALL_ADDED_TOKENS:
        ids = tok.encode(t).ids
        assert len(ids) == 1, t
    text = tokens.BOS + "héllo" + tokens.THINK_START + "x" + tokens.EOS
    assert tok.decode(tok.encode(text).ids, skip_special_tokens=False) == text
    gen = json.loads((tiny / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tok.token_to_id(tokens.EOS)


def test_weights_round_trip_and_layout(tiny, tmp_path):
    m = load_model(tiny)
    stored = {}
    for f in tiny.glob("*.safetensors"):
        stored.update(load_file(str(f)))
    params = dict(m.named_parameters())
    for k, v in stored.items():
        assert torch.equal(params[k.removeprefix("language_model.")], v.float()), k
    # the text layout (model.layers.N...) plus vision/mtp keys loads to the same weights
    text = tmp_path / "text"
    text.mkdir()
    (text / "config.json").write_text(
        json.dumps(json.loads((tiny / "config.json").read_text())["text_config"])
    )
    extra = {k.removeprefix("language_model."): v for k, v in stored.items()}
    extra["vision_tower.blocks.0.fc1.weight"] = torch.zeros(2, 2)
    extra["multi_modal_projector.linear_1.weight"] = torch.zeros(2, 2)
    extra["model.mtp.layers.0.eh_proj.weight"] = torch.zeros(3, 3)
    save_file(extra, str(text / "model.safetensors"))
    m2 = load_model(text)
    for k, p in m2.named_parameters():
        assert torch.equal(p, params[k]), k


def test_fp8_dequantisation_round_trip():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(300, 200, generator=g)
    w[:128, :128] *= 100  # blocks with different ranges get different scales
    q, s = quantize_fp8(w)
    assert q.dtype == torch.float8_e4m3fn and s.shape == (3, 2)
    back = dequantize_fp8(q, s)
    rel = ((back - w).abs() / w.abs().clamp(min=1e-3)).median()
    assert rel < 0.04  # e4m3 keeps 3 mantissa bits
    assert torch.equal(dequantize_fp8(q, s), back)
    with pytest.raises(ValueError, match="block scale"):
        dequantize_fp8(q, s[:, :1])


def test_fp8_checkpoint_loads_dequantised(tmp_path):
    ref = init_tiny(tmp_path / "bf", TinySpec(layers=2, seed=2))
    fp8 = init_tiny(tmp_path / "f8", TinySpec(layers=2, seed=2, fp8=True))
    a, b = load_model(ref), load_model(fp8)
    stored = {}
    for f in fp8.glob("*.safetensors"):
        stored.update(load_file(str(f)))
    name = "language_model.model.layers.1.self_attn.q_proj.weight"
    assert stored[name].dtype == torch.float8_e4m3fn
    pa = dict(a.named_parameters())["model.layers.1.self_attn.q_proj.weight"]
    pb = dict(b.named_parameters())["model.layers.1.self_attn.q_proj.weight"]
    want = dequantize_fp8(stored[name], stored[name + "_scale_inv"])
    assert torch.equal(pb, want)
    assert (pa - pb).abs().max() < 0.1 * pa.abs().max()


def test_mxfp8_round_trip():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(70, 200, generator=g)
    w[:, :32] *= 1000  # blocks of 32 with different ranges get different exponents
    q, e = quantize_mxfp8(w)
    assert q.dtype == torch.float8_e4m3fn and e.dtype == torch.uint8 and e.shape == (70, 7)
    assert len(set(e[:, 0].tolist()) & set(e[:, 1].tolist())) == 0
    back = dequantize_mxfp8(q, e)
    rel = ((back - w).abs() / w.abs().clamp(min=1e-3)).median()
    assert rel < 0.04  # e4m3 keeps 3 mantissa bits; power-of-two scales lose no more
    with pytest.raises(ValueError, match="MXFP8 scale has shape"):
        dequantize_mxfp8(q, e[:, :3])
    nan = e.clone()
    nan[0, 0] = 255
    with pytest.raises(ValueError, match="NaN"):
        dequantize_mxfp8(q, nan)


def _logits(path, ids):
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.core.llm_engine import LLMEngine
    from m3agent.engine.native.core.sampling_params import native_params

    engine = LLMEngine(load_model(path), None, EngineConfig(num_gpu_blocks=16, keep_logits=True))
    out = engine.generate([ids], native_params(max_tokens=3, ignore_eos=True))[0]
    return out.token_ids, torch.stack(engine.kept_logits[out.request_id])


def test_mxfp8_checkpoint_matches_bf16_within_fp8_error(tmp_path):
    """`model init-tiny --mxfp8` writes ModelOpt-style MXFP8 (e4m3 + e8m0 per 1x32 in
    weight_scale_inv); the native loader widens it and the model matches the BF16 one."""
    opts = [
        "--layers",
        "3",
        "--hidden",
        "256",
        "--experts",
        "3",
        "--seed",
        "7",
        "--topk-blocks",
        "2",
    ]
    runner = CliRunner()
    for name, extra in (("bf", []), ("mx", ["--mxfp8"])):
        r = runner.invoke(build_app(), ["model", "init-tiny", str(tmp_path / name)] + opts + extra)
        assert r.exit_code == 0, r.output
    stored = {}
    for f in (tmp_path / "mx").glob("*.safetensors"):
        stored.update(load_file(str(f)))
    name = "language_model.model.layers.2.block_sparse_moe.experts.1.w2.weight"
    assert stored[name].dtype == torch.float8_e4m3fn
    assert stored[name + "_scale_inv"].dtype == torch.uint8
    cfg = json.loads((tmp_path / "mx" / "config.json").read_text())
    assert cfg["quantization_config"]["quant_algo"] == "MXFP8"
    mx = load_model(tmp_path / "mx")
    p = dict(mx.named_parameters())["model.layers.2.block_sparse_moe.experts.1.w2.weight"]
    assert torch.equal(p, dequantize_mxfp8(stored[name], stored[name + "_scale_inv"]))
    ids = torch.randint(3, 250, (300,), generator=torch.Generator().manual_seed(3)).tolist()
    bf_tokens, bf = _logits(tmp_path / "bf", ids)
    mx_tokens, mxl = _logits(tmp_path / "mx", ids)
    # the prefill's logits (same inputs): within e4m3's ~3% per-weight error
    cos = torch.nn.functional.cosine_similarity(bf[0], mxl[0], dim=0).item()
    assert cos > 0.995, cos
    assert ((bf[0] - mxl[0]).abs().max() / bf[0].abs().max()).item() < 0.15
    assert bf_tokens[0] == mx_tokens[0]
    r = runner.invoke(
        build_app(), ["model", "init-tiny", str(tmp_path / "both"), "--fp8", "--mxfp8"]
    )
    assert r.exit_code == 2 and "pick one" in r.output


def test_errors_name_the_cause(tiny, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_model(tmp_path / "nope")
    # corrupt shard
    bad = _copy(tiny, tmp_path / "corrupt")
    shard = bad / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:1000])
    with pytest.raises(ValueError, match="corrupt safetensors file .*model-00001"):
        load_model(bad)
    # a shard listed in the index is missing
    miss = _copy(tiny, tmp_path / "missing")
    (miss / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ValueError, match="model-00002-of-00002.safetensors .* is missing"):
        load_model(miss)
    # config says a wider model than the weights
    wide = _copy(tiny, tmp_path / "wide")
    cfg = json.loads((wide / "config.json").read_text())
    cfg["text_config"]["hidden_size"] = 192
    (wide / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"tensor language_model\.\S+ has shape .* implies"):
        load_model(wide)
    # a tensor absent from the checkpoint
    gone = _copy(tiny, tmp_path / "gone")
    shard = gone / "model-00002-of-00002.safetensors"
    t = load_file(str(shard))
    victim = sorted(t)[0]
    del t[victim]
    save_file(t, str(shard))
    with pytest.raises(ValueError, match="missing tensor.*" + victim.split(".")[-2]):
        load_model(gone)
    # unknown architecture
    other = _copy(tiny, tmp_path / "other")
    (other / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    with pytest.raises(ValueError, match="unknown architecture.*mamba"):
        load_model(other)


def test_max_model_len_needs_yarn(tiny):
    with pytest.raises(ValueError, match="rope_scaling"):
        load_model(tiny, max_model_len=1_048_576)
    m = load_model(tiny, max_model_len=1_048_576, rope_scaling={"rope_type": "yarn", "factor": 2.0})
    assert m.info.max_position_embeddings == 1_048_576


def test_eos_from_generation_config_when_text_config_has_none(tiny, tmp_path):
    d = _copy(tiny, tmp_path / "noeos")
    cfg = json.loads((d / "config.json").read_text())
    want = cfg["text_config"].pop("eos_token_id")
    (d / "config.json").write_text(json.dumps(cfg))
    assert load_model(d).info.eos_token_ids == (want,)


def test_large_vocab_gets_the_bundled_m3_tokenizer(tmp_path):
    from m3agent.engine.m3 import tokens
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    d = init_tiny(tmp_path / "big", TinySpec(layers=1, hidden=128, vocab=8192, dense_layers=1))
    tok = M3Tokenizer.from_model_dir(d)
    assert tok.hf_tokenizer.get_vocab_size() <= 8192
    eos = tok.token_to_id(tokens.EOS)
    assert json.loads((d / "generation_config.json").read_text())["eos_token_id"] == eos
    assert load_model(d).info.eos_token_ids == (eos,)
    assert len(tok.encode("def fibonacci(n): return n")) < 26  # real merges, not bytes
