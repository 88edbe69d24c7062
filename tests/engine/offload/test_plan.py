"""The placement planner against real checkpoints written by init-tiny and M3's real shapes."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from m3agent.engine.m3.config import M3TextConfig, text_config_to_dict
from m3agent.engine.offload.fit_hints import what_would_fit
from m3agent.engine.offload.hardware import GIB, Machine
from m3agent.engine.offload.inventory import (
    Part,
    StorageFormat,
    classify,
    from_checkpoint,
    from_config,
    matrix_bytes,
)
from m3agent.engine.offload.kv_bytes import kv_bytes_per_token
from m3agent.engine.offload.plan import ExpertForm, PlanRequest, make_plan

H200 = Machine(
    gpu_name="NVIDIA H200",
    gpu_bytes=139 * GIB,
    gpu_read_bw=4.47e12,
    host_bytes=120 * GIB,
    host_read_bw=93e9,
    pcie_bw=55e9,
    cpu_threads=16,
)
# the same GPU in a workstation with a larger, faster host
WORKSTATION = replace(H200, host_bytes=512 * GIB, host_read_bw=400e9, cpu_threads=64)


def m3cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("m3agent")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "m3agent.app.cli"]
    return subprocess.run(
        [*cmd, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def real_m3_dir(tmp_path: Path, quant: dict | None) -> Path:
    d = tmp_path / "m3"
    d.mkdir()
    cfg = {"model_type": "minimax_m3_vl", "text_config": text_config_to_dict(M3TextConfig())}
    if quant:
        cfg["quantization_config"] = quant
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    out = {}
    for fmt in ("bf16", "fp8"):
        d = tmp_path_factory.mktemp(f"tiny-{fmt}")
        init_tiny(d, TinySpec(layers=3, hidden=256, experts=4, fp8=fmt == "fp8"))
        out[fmt] = d
    return out


@pytest.mark.parametrize("fmt", ["bf16", "fp8"])
def test_config_sizes_equal_the_stored_bytes(tiny_dirs, fmt):
    cfg, stored = from_checkpoint(tiny_dirs[fmt])
    assert stored.source == "safetensors" and stored.fmt == StorageFormat(fmt)
    synth = from_config(cfg, StorageFormat(fmt))
    assert synth.parts == stored.parts
    assert synth.experts == stored.experts


def test_inventory_counts_every_byte_of_the_files(tiny_dirs):
    d = tiny_dirs["fp8"]
    _, inv = from_checkpoint(d)
    payload = 0
    for f in d.glob("*.safetensors"):
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
        payload += f.stat().st_size - 8 - n
    assert inv.total == payload
    assert inv.parts[Part.ROUTED_EXPERTS] > 0 and inv.parts[Part.ATTENTION] > 0


def test_names_classify_like_the_checkpoint_layout():
    pre = "language_model.model.layers.7."
    assert classify(pre + "block_sparse_moe.experts.3.w2.weight") is Part.ROUTED_EXPERTS
    assert classify(pre + "block_sparse_moe.experts.3.w2.weight_scale_inv") is Part.ROUTED_EXPERTS
    assert classify(pre + "block_sparse_moe.shared_experts.up_proj.weight") is Part.SHARED_EXPERTS
    assert classify(pre + "block_sparse_moe.gate.weight") is Part.ROUTER
    assert classify(pre + "self_attn.index_q_proj.weight") is Part.ATTENTION
    assert classify(pre + "mlp.down_proj.weight") is Part.DENSE_MLP
    assert classify("language_model.model.mtp.layers.0.eh_proj.weight") is Part.MTP
    assert classify("vision_tower.blocks.0.attn.qkv.weight") is Part.VISION
    assert classify("language_model.lm_head.weight") is Part.LM_HEAD


def test_real_m3_figures():
    c = M3TextConfig()
    # SPEC 3.2: 137,472 bytes per token at TP 1 with bf16 K/V and index keys.
    assert kv_bytes_per_token(c, "bf16") == 137_472
    inv = from_config(c, StorageFormat.FP8)
    # The figure: 4 of 128 experts x 57 layers x 3 x 6144 x 3072 bytes ~ 12.9 GB/token.
    per_token = sum(4 * size for _, size in inv.experts.values())
    assert len(inv.experts) == 57
    assert abs(per_token - 4 * 57 * 3 * 6144 * 3072) / per_token < 0.001
    assert 12.8e9 < per_token < 13.0e9
    # MXFP8 keeps one e8m0 byte per 32 weights of a row.
    assert matrix_bytes(3072, 6144, StorageFormat.MXFP8) == 3072 * 6144 + 3072 * 6144 // 32


def test_full_m3_does_not_fit_128gb_host_and_says_what_would(tmp_path):
    c = M3TextConfig()
    inv = from_config(c, StorageFormat.FP8)
    req = PlanRequest(context_len=131072)
    plan = make_plan(c, inv, H200, req)
    assert not plan.fits and plan.total("gpu") <= plan.gpu_capacity
    hint = what_would_fit(c, inv, H200, req)
    assert "--moe-layers" in hint
    n = int(hint.split("--moe-layers ")[1].split()[0])
    smaller = make_plan(c, inv, H200, PlanRequest(context_len=131072, moe_layers=n))
    bigger = make_plan(c, inv, H200, PlanRequest(context_len=131072, moe_layers=n + 1))
    assert smaller.fits and not bigger.fits


def test_workstation_plan_fits_with_hot_experts_and_bounds():
    c = M3TextConfig()
    inv = from_config(c, StorageFormat.FP8)
    plan = make_plan(c, inv, WORKSTATION, PlanRequest(context_len=1_048_576, hot_experts=True))
    assert plan.fits and plan.expert_form is ExpertForm.INT8
    assert plan.hot_per_layer > 0
    assert plan.total("gpu") <= 0.96 * plan.gpu_capacity
    # Host part of the bound: the non-cached share of 4 experts per layer at 400 GB/s.
    one = 3 * 6144 * 3072 + 4 * (2 * 3072 + 6144)
    expect = 57 * 4 * (1 - plan.hot_per_layer / 128) * one / 400e9
    assert plan.decode_host_s == pytest.approx(expect, rel=1e-9)
    assert plan.ttft_1m_s is not None and plan.ttft_1m_s > plan.stream_pass_s


def test_bf16_context_too_long_for_the_gpu_hints_a_shorter_one():
    c = M3TextConfig()
    inv = from_config(c, StorageFormat.FP8)
    req = PlanRequest(context_len=1_048_576, kv_cache_dtype="bf16", max_seqs=2, kv_host_tier=False)
    assert not make_plan(c, inv, WORKSTATION, req).fits
    hint = what_would_fit(c, inv, WORKSTATION, req)
    assert "--context" in hint and "--kv-cache-dtype fp8" in hint


# A workstation with a 32 GB card (RTX 5090-like) and 512 GiB of host memory.
CARD_32GB = replace(WORKSTATION, gpu_name="NVIDIA RTX 5090", gpu_bytes=32 * GIB, pcie_bw=50e9)


def test_1m_tokens_on_a_32gb_card_with_the_host_tier():
    c = M3TextConfig()
    inv = from_config(c, StorageFormat.FP8)
    req = PlanRequest(context_len=1_048_576)
    whole = make_plan(c, inv, CARD_32GB, replace(req, kv_host_tier=False))
    assert not whole.fits and not whole.kv_host_tier  # 1M tokens of KV: 67 GiB
    # auto: the tier is chosen; the MSA layers' K/V (57 x 2 x 4 x 128 fp8 bytes per token)
    # moves to host memory, the index keys and the dense layers' K/V stay
    plan = make_plan(c, inv, CARD_32GB, req)
    assert plan.kv_host_tier
    host_kv = next(r for r in plan.rows if r.label.startswith("KV host tier"))
    assert host_kv.where == "host" and host_kv.nbytes == 1_048_576 * 57 * 1024
    gpu_kv = next(r for r in plan.rows if r.label.startswith("index keys"))
    assert gpu_kv.nbytes == 1_048_576 * (57 * 128 + 3 * 1024)
    assert any(r.label.startswith("host-tier block cache") for r in plan.rows)
    # 64 blocks (4 KV heads x top-16) of 128 tokens in 57 layers over PCIe when none is cached
    assert plan.decode_fetch_s == pytest.approx(64 * 128 * 57 * 1024 / 50e9)
    # the default prefill buffers leave the card ~1.3 GiB short: the hint halves them
    assert not plan.fits
    assert what_would_fit(c, inv, CARD_32GB, req).startswith("--stream-experts 16")
    fitted = make_plan(c, inv, CARD_32GB, replace(req, stream_experts=16))
    assert fitted.fits and fitted.kv_host_tier
    # a 48 GB card needs no change
    assert make_plan(c, inv, replace(CARD_32GB, gpu_bytes=48 * GIB), req).fits


def test_cli_plan_text_json_and_errors(tmp_path, tiny_dirs):
    d = real_m3_dir(tmp_path, {"quant_method": "fp8", "weight_block_size": [128, 128]})
    base = ["model", "plan", str(d), "--gpu-mem", "139", "--gpu-bw", "4470", "--host-bw", "93"]
    ok = m3cli(*base, "--host-mem", "512", "--json")
    assert ok.returncode == 0, ok.stderr
    got = json.loads(ok.stdout)
    assert got["fits"] and got["checkpoint_format"] == "fp8" and got["moe_layers_total"] == 57
    refused = m3cli(*base, "--host-mem", "120")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "would fit: --moe-layers" in refused.stderr
    assert "routed experts" in refused.stdout
    card = ["--gpu-mem", "32", "--gpu-bw", "1800", "--host-mem", "512", "--host-bw", "200"]
    tier = m3cli("model", "plan", str(d), *card, "--context", "1048576", "--stream-experts", "16")
    assert tier.returncode == 0, tier.stderr
    assert "KV host tier: MSA K/V pages, fp8, pinned" in tier.stdout
    assert "KV cache: host-memory tier" in tier.stdout
    missing = m3cli("model", "plan", str(tmp_path / "nope"), "--gpu-mem", "80")
    assert missing.returncode == 2 and missing.stderr.startswith("error: ")
    bad = m3cli(*base, "--host-mem", "512", "--kv-cache-dtype", "fp4")
    assert bad.returncode == 2 and "kv cache dtype" in bad.stderr
    if not _cuda():
        nogpu = m3cli("model", "plan", str(d), "--host-mem", "512", "--host-bw", "93")
        assert nogpu.returncode == 2 and "give --gpu-mem" in nogpu.stderr
    tiny = m3cli(
        "model",
        "plan",
        str(tiny_dirs["bf16"]),
        "--gpu-mem",
        "8",
        "--gpu-bw",
        "1000",
        "--host-mem",
        "16",
        "--host-bw",
        "20",
        "--json",
    )
    assert tiny.returncode == 0, tiny.stderr
    assert json.loads(tiny.stdout)["inventory_source"] == "safetensors"


def test_the_plan_counts_the_kv_pages_serve_takes_beyond_its_context():
    """The engine on a GPU sizes its KV cache for up to four whole contexts of the model's
    length within 90% of the free memory: the plan adds those pages as a row (not needed to
    fit), with the engine's own constants. On the H100 of 2026-12-07 the plan without them was
    17.9 GB against a 30.4 GB peak."""
    from m3agent.engine.native.core.cache_setup import GPU_FULL_CONTEXTS
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.offload import plan as plan_mod

    assert plan_mod.SERVE_CONTEXTS == GPU_FULL_CONTEXTS
    assert plan_mod.SERVE_KV_SHARE == EngineConfig().gpu_memory_utilization
    c = M3TextConfig()
    inv = from_config(c, StorageFormat.FP8)
    req = PlanRequest(context_len=131072, kv_host_tier=False)
    plan = make_plan(c, inv, H200, req)
    (row,) = [r for r in plan.rows if r.label.startswith("KV pages serve adds")]
    per_token = plan.kv_bytes_per_token
    whole = 4 * c.max_model_len * per_token
    assert row.nbytes <= whole - 131072 * per_token
    # a card the rest nearly fills: fewer pages (90% of what is left), never over the card
    small = replace(H200, gpu_bytes=plan.total("gpu") - row.nbytes + 4 * GIB)
    tight = make_plan(c, inv, small, req)
    (less,) = [r for r in tight.rows if r.label.startswith("KV pages serve adds")]
    assert less.nbytes < row.nbytes and tight.total("gpu") <= small.gpu_bytes
