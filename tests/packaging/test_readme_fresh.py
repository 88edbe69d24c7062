"""README's first command, literally, on a fresh clone: `python3 -m venv .venv &&
.venv/bin/pip install -e . && .venv/bin/m3agent` (under tmux: the first-run screen), then the
"First commands" block in that torch-less venv: the scripted demo answers, and the native
commands say in one line what to install (exit 3), never a traceback. Downloads the
dependencies from PyPI, so it is slow and skipped without the registry."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _pypi_reachable() -> bool:
    try:
        urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_readme_commands_on_a_fresh_clone(tmp_path):
    if not _pypi_reachable():
        pytest.skip("PyPI is not reachable")
    clone = tmp_path / "m3agent"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True, timeout=120)
    python = shutil.which("python3") or sys.executable
    # the README's command, up to the TUI (which needs a terminal: tmux below)
    subprocess.run(
        f"{python} -m venv .venv && .venv/bin/pip install -q -e .",
        shell=True,
        cwd=clone,
        check=True,
        timeout=900,
    )
    m3 = clone / ".venv" / "bin" / "m3agent"
    home = tmp_path / "home"
    env = {"PATH": f"{clone / '.venv/bin'}:/usr/bin:/bin", "M3AGENT_HOME": str(home)}
    no_torch = subprocess.run(
        [str(clone / ".venv/bin/python"), "-c", "import torch"], capture_output=True, env=env
    )
    assert no_torch.returncode != 0  # the one-command install has no torch
    socket = f"m3agent-readme-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run(
            ["tmux", "-L", socket, "new-session", "-d", "-s", "t", "-x", "110", "-y", "36",
             f"cd {clone} && env M3AGENT_HOME={home} TERM=xterm-256color .venv/bin/m3agent"],
            check=True, timeout=10,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        screen = ""
        while time.monotonic() < deadline and "Which model should answer" not in screen:
            time.sleep(0.5)
            screen = subprocess.run(
                ["tmux", "-L", socket, "capture-pane", "-p", "-t", "t"],
                capture_output=True, text=True, timeout=10,
            ).stdout  # fmt: skip
        assert "Which model should answer" in screen, screen
    finally:
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, timeout=10)
    # "First commands on a fresh machine"
    demo = tmp_path / "demo"
    demo.mkdir()
    subprocess.run(["git", "init", "-q", str(demo)], check=True)
    (demo / "hello.py").write_text('print("hi")\n')
    script = tmp_path / "script.json"
    script.write_text('["<mm:think>Nothing to do.</mm:think>Done: nothing to change."]')
    r = subprocess.run([str(m3), "run", "--engine", "scripted", "--script", str(script),
                        "hello"], cwd=demo, env=env, capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0 and r.stdout == "Done: nothing to change.\n", r.stderr
    for args in (["model", "init-tiny", str(tmp_path / "tiny-m3")],
                 ["run", "--engine", "native", "--model", str(tmp_path / "tiny-m3"),
                  "--max-tokens", "32", "hello"]):  # fmt: skip
        r = subprocess.run([str(m3), *args], cwd=demo, env=env, capture_output=True,
                           text=True, timeout=120)  # fmt: skip
        assert r.returncode == 3, r.stderr
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
