"""`doctor` and `model plan` say whether this machine can run M3 and with which expert form."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from m3agent.app.engine_check import check_engine, placement_row
from m3agent.app.settings import Settings
from m3agent.engine.m3.config import M3TextConfig, text_config_to_dict
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny
from m3agent.engine.offload.hardware import GIB, meminfo_available

EXE = Path(sys.executable).with_name("m3agent")


def _settings(tmp_path, **kw) -> Settings:
    return Settings(home=tmp_path / "home", config_path=tmp_path / "none.toml", **kw)


def _m3_config_dir(tmp_path: Path) -> Path:
    d = tmp_path / "m3"
    d.mkdir()
    cfg = {
        "model_type": "minimax_m3_vl",
        "text_config": text_config_to_dict(M3TextConfig()),
        "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]},
    }
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_full_m3_on_one_h200_here_is_refused_with_what_would_fit(tmp_path):
    """The released M3 (FP8, ~413 GB of experts) with this machine's RAM and a 139 GiB GPU:
    the host memory is far short, and the row names what would fit."""
    row = placement_row(_m3_config_dir(tmp_path), [139 * GIB], _settings(tmp_path))
    assert meminfo_available() < 300 * GIB  # this test is about a machine short of RAM
    assert not row.ok and row.detail.startswith("cannot run here at 128K context")
    assert "GiB of host memory" in row.detail and "\n" not in row.detail


def test_tiny_m3_without_gpu_runs_from_host_memory_and_a_forced_plan_names_the_form(tmp_path):
    tiny = init_tiny(tmp_path / "tiny", TinySpec(layers=2, hidden=128, experts=2))
    rows = {r.name: r for r in check_engine(_settings(tmp_path, engine="native", model=str(tiny)))}
    assert rows["model"].ok and rows["offload"].ok
    assert rows["offload"].detail.startswith("no GPU: all 0.0 GiB of weights in host memory")
    # with a (given) GPU and offload forced: the plan fits and names the form to run with
    forced = placement_row(tiny, [24 * GIB], _settings(tmp_path, offload_experts="on"))
    assert forced.ok and "routed experts in host memory as bf16" in forced.detail
    assert forced.detail.endswith("--expert-form bf16")
    paged = placement_row(
        tiny, [24 * GIB], _settings(tmp_path, offload_experts="on", kv_host_tier="on")
    )
    assert paged.ok and paged.detail.endswith(
        "--expert-form bf16; KV host tier on (forced): the MSA layers' K/V pages in host memory"
    )
    small = placement_row(tiny, [24 * GIB], _settings(tmp_path))
    assert small.ok and small.detail == "the weights fit the GPU: no expert offload"


def test_model_plan_tells_how_to_run_it_here(tmp_path):
    tiny = init_tiny(tmp_path / "tiny", TinySpec(layers=2, hidden=128, experts=2))
    env = {**os.environ, "M3AGENT_HOME": str(tmp_path / "home")}
    r = subprocess.run(
        [str(EXE), "model", "plan", str(tiny), "--context", "4096", "--gpu-bw", "1000",
         "--host-bw", "20"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    if r.returncode == 2 and "no CUDA GPU here" in r.stderr:  # no GPU to probe: plan for one
        r = subprocess.run(
            [str(EXE), "model", "plan", str(tiny), "--context", "4096", "--gpu-mem", "24",
             "--gpu-bw", "1000", "--host-bw", "20"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert "this machine runs it" not in r.stdout  # a plan for another machine
        return
    assert r.returncode == 0, r.stderr
    assert f"m3agent run --engine native --model {tiny} --expert-form" in r.stdout


def test_doctor_flags_check_a_native_model_here(tmp_path):
    tiny = init_tiny(tmp_path / "tiny", TinySpec(layers=2, hidden=128, experts=2))
    env = {**os.environ, "M3AGENT_HOME": str(tmp_path / "home")}
    r = subprocess.run(
        [str(EXE), "doctor", "--json", "--no-mcp", "--cwd", str(tmp_path), "--engine", "native",
         "--model", str(tiny)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    rows = {row["name"]: row for row in json.loads(r.stdout)["engine"]}
    assert rows["engine"]["detail"] == "native" and rows["model"]["ok"]
    assert rows["offload"]["ok"] and "weights in host memory" in rows["offload"]["detail"]
    bad = subprocess.run(
        [str(EXE), "doctor", "--no-mcp", "--expert-form", "int3"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert (
        bad.returncode == 2 and "expert_form must be auto, int8, int4, mxfp8 or bf16" in bad.stderr
    )


def test_the_terminal_ui_takes_the_offload_flags_run_takes(tmp_path):
    """`m3agent --offload-experts ... --expert-form ...` (the TUI) checks them as run does,
    before any screen is drawn: a bad value is one line and exit 2."""
    env = {**os.environ, "M3AGENT_HOME": str(tmp_path / "home")}
    for flag, value, why in (
        ("--expert-form", "int3", "expert_form must be auto, int8, int4, mxfp8 or bf16"),
        ("--offload-experts", "maybe", "offload_experts must be auto, on or off"),
    ):
        bad = subprocess.run(
            [str(EXE), flag, value, "--cwd", str(tmp_path)],
            capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert bad.returncode == 2 and why in bad.stderr, bad.stderr
