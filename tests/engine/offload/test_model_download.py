"""`m3agent model download`: bad input and an unreachable hub are one line and a documented
exit code (no network in the tests: HF_HUB_OFFLINE makes the hub unreachable for real)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXE = Path(sys.executable).with_name("m3agent")


def run(tmp_path, *args):
    env = {
        **os.environ,
        "M3AGENT_HOME": str(tmp_path / "home"),
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
    }
    return subprocess.run(
        [str(EXE), "model", "download", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_bad_repo_id_is_a_usage_error(tmp_path):
    r = run(tmp_path, "not a repo")
    assert r.returncode == 2
    assert r.stderr.strip() == "error: 'not a repo' is not a hub repo id (owner/name)"


def test_unreachable_hub_is_engine_unavailable_in_one_line(tmp_path):
    r = run(tmp_path, "MiniMaxAI/MiniMax-M3", "--dir", str(tmp_path / "m3"))
    assert r.returncode == 3, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: cannot download MiniMaxAI/MiniMax-M3") and "resume" in line
    assert r.stdout == ""
