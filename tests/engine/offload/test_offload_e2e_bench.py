"""bench/offload_e2e.py (the H200 run of issue 26) in its --smoke mode: tiny sizes on the CPU,
every case of the real run, so the script cannot rot between GPU runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[3] / "bench" / "offload_e2e.py"


def test_offload_e2e_smoke_writes_every_row(tmp_path):
    r = subprocess.run(
        [sys.executable, str(BENCH), "--smoke", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "[offload_e2e" in r.stderr  # progress lines
    (path,) = tmp_path.glob("offload_e2e_smoke_*.json")
    doc = json.loads(path.read_text())
    assert doc["env"]["smoke"] and doc["env"]["host_read_gbs"] > 0
    rows = doc["rows"]
    for form in ("int8", "bf16"):
        dec = [x for x in rows if x["name"] == "offload_decode" and x["form"] == form]
        assert {(x["batch"], x["context"], x["hot_cache"]) for x in dec} == {
            (b, c, h) for b in (1, 2) for c in (512, 1024) for h in (False, True)
        }
        for x in dec:
            assert x["ms_per_step"] > 0 and x["host_bound_ms_per_step"] > 0
            assert x["extrapolated_57_layers_ms_per_step"] > x["ms_per_step"]
            if x["hot_cache"]:
                assert x["hot_experts_per_layer"] == 2 and 0 < x["hot_hit_rate"] <= 1
        pre = [x for x in rows if x["name"] == "offload_prefill" and x["form"] == form]
        assert [x["chunk"] for x in pre] == [128, 256]
        # every expert of both MoE layers crossed to the "GPU" for each chunk
        (mem,) = [x for x in rows if x["name"] == "offload_memory" and x["form"] == form]
        assert all(x["bytes_streamed"] >= mem["host_experts_bytes"] for x in pre)
        assert mem["host_planned"] > 0 and mem["host_measured"] > 0
        assert mem["plan_rows"][f"routed experts, {form}, pinned (2 layers)"] > 0
