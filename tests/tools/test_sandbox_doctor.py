"""`m3agent doctor` names this machine's gaps (issue 13): the installed console script, with
and without bubblewrap (`--without bwrap` judges the policy as if it were missing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).with_name("m3agent")


def _doctor(tmp_path, *args: str) -> tuple[int, dict]:
    if not EXE.is_file():
        pytest.skip("the m3agent console script is not installed next to this interpreter")
    env = {**os.environ, "M3AGENT_HOME": str(tmp_path / "m3home")}
    env.pop("M3AGENT_CONFIG", None)
    r = subprocess.run(
        [str(EXE), "doctor", "--json", "--cwd", str(tmp_path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return r.returncode, json.loads(r.stdout)


def test_doctor_names_the_gaps_without_bubblewrap(tmp_path):
    code, rep = _doctor(tmp_path, "--without", "bwrap")
    layers = {x["name"]: x for x in rep["layers"]}
    assert not layers["bwrap"]["active"] and "privileges" in layers
    if not layers["landlock"]["active"]:
        pytest.skip("no Landlock here either")
    gaps = "\n".join(rep["gaps"])
    assert "chmod and utime" in gaps and "unix sockets are refused" in gaps
    assert "nested repository" in gaps
    assert code == 0


def test_doctor_with_bubblewrap_has_fewer_gaps(tmp_path):
    if not shutil.which("bwrap"):
        pytest.skip("bubblewrap is not installed")
    _, rep = _doctor(tmp_path)
    if not {x["name"]: x for x in rep["layers"]}["bwrap"]["active"]:
        pytest.skip("bubblewrap cannot run here")
    gaps = "\n".join(rep["gaps"])
    assert "chmod and utime" not in gaps and "nested repository" in gaps


def test_doctor_flags_a_readable_data_dir(tmp_path):
    home = tmp_path / "m3home"
    (home / "sessions").mkdir(parents=True)
    os.chmod(home, 0o755)
    _, rep = _doctor(tmp_path)
    assert any(str(home) in g and "0755" in g for g in rep["gaps"]), rep["gaps"]
    os.chmod(home, 0o700)
    os.chmod(home / "sessions", 0o700)
    _, rep = _doctor(tmp_path)
    assert not any(str(home) in g for g in rep["gaps"]), rep["gaps"]


def test_doctor_rejects_an_unknown_layer(tmp_path):
    if not EXE.is_file():
        pytest.skip("no console script")
    r = subprocess.run(
        [str(EXE), "doctor", "--without", "apparmor", "--cwd", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0 and "unknown sandbox layer" in r.stderr
