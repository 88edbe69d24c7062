"""Issue 22 item 3: quitting the TUI with a background `m3agent serve` says so (pid, memory,
when it stops by itself) and offers to stop it; an auto-started server has an idle timeout.
The real program under tmux on a tiny random M3 (native engine, CPU), and `m3agent serve
--idle-timeout` as a real process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tmux_driver import Tmux, pane_command

from ...support.cli import CONSOLE_SCRIPT, init_tiny_model

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    pytest.mark.slow,
]
M3AGENT = Path(sys.executable).with_name("m3agent")


@pytest.fixture
def tiny(tmp_path) -> Path:
    return init_tiny_model(tmp_path / "tiny", command=CONSOLE_SCRIPT)


def _locks(home: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in (home / "serve").glob("*.json")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_quit_says_the_server_runs_and_stops_it_on_y(tmp_path, repo, tiny):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('device = "cpu"\nmax_tokens = 4\n')
    tmux = Tmux()
    try:
        tmux.start(
            pane_command(
                f"M3AGENT_HOME={home} TERM=xterm-256color",
                str(M3AGENT),
                f"--engine native --model {tiny} --cwd {repo}",
            )
        )
        tmux.wait_for("Ask m3agent", timeout=120)
        tmux.wait_for("native", timeout=120)  # the session is open on the server
        deadline = time.monotonic() + 120
        while not _locks(home) and time.monotonic() < deadline:
            time.sleep(0.2)
        (lock,) = _locks(home)
        tmux.press("C-q")
        tmux.wait_for("stop it now? [y/N]", timeout=60)
        screen = " ".join(tmux.joined_screen().split())  # the line wraps at 110 columns
        assert f"background m3agent serve (pid {lock['pid']}" in screen
        assert "it stops after 30 min unused" in screen and "m3agent serve --stop" in screen
        assert _alive(lock["pid"])  # asked, not yet stopped
        tmux.press("y", "Enter")
        tmux.wait_for(f"stopped pid {lock['pid']}", timeout=60)
        tmux.wait_for("EXIT=0", timeout=30)
        assert not _alive(lock["pid"])
    finally:
        tmux.close()
        for lk in _locks(home):  # never leave a server behind a failed test
            if _alive(lk["pid"]):
                os.kill(lk["pid"], 15)


def test_an_idle_server_stops_itself(tmp_path, tiny):
    home = tmp_path / "home"
    env = dict(os.environ, M3AGENT_HOME=str(home))
    env.pop("M3AGENT_CONFIG", None)
    home.mkdir()
    (home / "config.toml").write_text('device = "cpu"\n')
    started = time.monotonic()
    p = subprocess.run(
        [str(M3AGENT), "serve", "--engine", "native", "--model", str(tiny), "--idle-timeout", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 0, p.stderr
    assert "idle for 2 s" in p.stderr and time.monotonic() - started >= 2
    assert not _locks(home)  # its lock is released: the next run starts a fresh one
    bad = subprocess.run([str(M3AGENT), "serve", "--model", str(tiny), "--idle-timeout", "0"],
                         env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert bad.returncode == 2 and "--idle-timeout must be positive" in bad.stderr
