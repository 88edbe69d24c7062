"""Programs the agent runs on the host (git for checkpoints, ripgrep for grep, the user's
hooks) are looked up on PATH. With a virtualenv of the project activated (`.venv/bin` first
on PATH), direnv's `PATH_add bin`, or a relative entry (`.`), a `git` or `rg` the sandboxed
model wrote into the workspace would run as the user, outside the sandbox, at the next
checkpoint or search. tools/host_programs.py keeps every such entry out of the lookup; the
control puts the old lookup back and the planted programs run."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from m3agent.tools import host_programs, safe_git
from m3agent.tools.base import ToolContext
from m3agent.tools.checkpoint import Checkpoints
from m3agent.tools.toolset import default_toolset
from sandbox_support import make_sandbox


def _plant(bin_dir: Path, name: str, marker: Path) -> None:
    real = shutil.which(name)
    bin_dir.mkdir(parents=True, exist_ok=True)
    exe = bin_dir / name
    exe.write_text(f'#!/bin/sh\necho {name} >> {marker}\nexec {real} "$@"\n')
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def planted(make_repo, tmp_path, monkeypatch):
    """A workspace with `git` and `rg` planted in its activated .venv/bin and its root (PATH
    also holds `.`), the agent started in it."""
    if shutil.which("git") is None or shutil.which("rg") is None:
        pytest.skip("needs git and ripgrep")
    ws = make_repo({"a.py": "needle = 1\n"})
    marker = tmp_path / "planted-ran"
    for name in ("git", "rg"):
        _plant(ws / ".venv" / "bin", name, marker)
        _plant(ws, name, marker)
    monkeypatch.setenv("PATH", f"{ws / '.venv' / 'bin'}:.:{os.environ['PATH']}")
    monkeypatch.chdir(ws)
    return ws, marker


def _checkpoint_and_grep(ws: Path, state: Path) -> str:
    Checkpoints(ws, state).snapshot("before write_file")
    r = default_toolset().dispatch("grep", {"pattern": "needle"}, ToolContext(cwd=ws))
    assert "a.py" in r.output, r.output
    return r.metadata["engine"]


def test_git_and_ripgrep_planted_in_the_workspace_do_not_run(planted, tmp_path, monkeypatch):
    ws, marker = planted
    assert _checkpoint_and_grep(ws, tmp_path / "state") == "rg"  # the real ripgrep
    assert not marker.exists()

    # Control: the lookup on the whole PATH, as before: both planted programs run.
    def whole(path=None, roots=()):
        return os.environ["PATH"] if path is None else path

    monkeypatch.setattr(host_programs, "host_path", whole)
    monkeypatch.setattr(safe_git, "host_path", whole)
    _checkpoint_and_grep(ws, tmp_path / "state2")
    assert set(marker.read_text().split()) == {"git", "rg"}


def test_host_path_drops_relative_and_workspace_entries(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    (ws / "bin").mkdir(parents=True)
    (tmp_path / "link").symlink_to(ws / "bin")
    monkeypatch.chdir(tmp_path)
    path = f".::bin:{ws / 'bin'}:{tmp_path / 'link'}:/usr/bin:/bin"
    assert host_programs.host_path(path, (ws,)) == "/usr/bin:/bin"
    with pytest.raises(FileNotFoundError, match="not found outside the workspace"):
        host_programs.host_argv(["no-such-program-m3"])


@pytest.fixture
def venv_tool(world, monkeypatch):
    """A program the model wrote into the workspace's activated .venv/bin (first on PATH)."""
    marker = world.ws / "planted-ran"
    tool = world.ws / ".venv" / "bin" / "m3-planted-tool"
    tool.parent.mkdir(parents=True)
    tool.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(host_programs, "_confined", None)
    return tool.name, marker


def test_what_the_process_starts_skips_the_workspace_and_commands_keep_it(world, venv_tool):
    """The engine's compiler builds (torch's c++ and ninja, Triton's cc) and the background
    serve are looked up on the process's own PATH: after the session confines it, a program
    planted in the activated venv is not found there, while sandboxed commands still get
    the PATH as given (they run confined)."""
    name, marker = venv_tool
    host_programs.confine_process_path([world.ws])
    with pytest.raises(FileNotFoundError):
        subprocess.run([name], check=False)
    assert not marker.exists()
    r = make_sandbox("bwrap", world).run([name], cwd=world.ws, timeout_s=30)
    assert r.started and marker.read_text() == "ran\n", r


def test_control_an_unconfined_process_runs_the_planted_program(world, venv_tool):
    name, marker = venv_tool
    subprocess.run([name], check=True)
    assert marker.read_text() == "ran\n"
