"""The data dir is private (issue 13, class 8): session logs, checkpoints and config files are
0600 (no group/other bit), their directories 0700, whatever the umask; what an older version
left world-readable is fixed when it is opened. Controls: the same writes with Python's and
git's defaults under the usual umask 022 are world-readable."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from m3agent.agent.conversation import Conversation
from m3agent.app.settings import load_settings
from m3agent.engine.api import Message
from m3agent.tools.checkpoint import Checkpoints, state_dir_for

from ..support.cli import CONSOLE_SCRIPT, run_cli, scripted_run
from ..support.markup import answer, calls, invoke


@pytest.fixture(autouse=True)
def usual_umask():
    old = os.umask(0o022)
    yield
    os.umask(old)


def modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(os.stat(root).st_mode)}
    for p in root.rglob("*"):
        if not p.is_symlink():
            out[str(p.relative_to(root))] = stat.S_IMODE(p.stat().st_mode)
    return out


def private(root: Path) -> list[str]:
    """Paths under root that another user could read or enter (empty: all private)."""
    bad = []
    for rel, mode in modes(root).items():
        p = root / rel
        if p.is_dir() and mode != 0o700:
            bad.append(f"{rel} {mode:o}")
        elif p.is_file() and mode & 0o077:
            bad.append(f"{rel} {mode:o}")
    return bad


def test_control_default_modes_are_world_readable(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d/log.jsonl").write_text("{}\n")
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "d/log.jsonl").stat().st_mode) == 0o644
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "g.git")], check=True)
    assert private(tmp_path / "g.git")  # git's defaults: 0755 dirs, 0644 files


def test_a_new_session_log_is_private(tmp_path):
    home = tmp_path / "home"  # does not exist yet: created 0700 with its sessions dir
    conv = Conversation.create(home / "sessions", cwd="/w")
    conv.append(Message(role="user", content="my secret plan"))
    conv.close()
    assert private(home) == []
    assert stat.S_IMODE(conv.path.stat().st_mode) == 0o600


def test_an_old_world_readable_session_is_fixed_on_load(tmp_path):
    sessions = tmp_path / "home/sessions"
    conv = Conversation.create(sessions, cwd="/w")
    conv.close()
    os.chmod(sessions, 0o755)
    os.chmod(conv.path, 0o644)
    assert private(sessions)  # control: as an older version left it
    Conversation.load(sessions, conv.id)
    assert private(sessions) == []


def test_checkpoints_are_private(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".env").write_text("TOKEN=abc\n")  # checkpoints copy it: it must stay private
    cps = Checkpoints(ws, state_dir_for(ws, tmp_path / "home/checkpoints"))
    cps.snapshot("one")
    (ws / "b.txt").write_text("b\n")
    cps.restore(cps.snapshot("two"))
    assert private(tmp_path / "home") == []


def test_old_world_readable_checkpoints_are_fixed_on_open(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    state = state_dir_for(ws, tmp_path / "home/checkpoints")
    Checkpoints(ws, state).snapshot("one")
    for p in [state.parent, *state.rglob("*"), state]:
        os.chmod(p, 0o755 if p.is_dir() else 0o644)
    assert private(tmp_path / "home")  # control
    assert Checkpoints(ws, state).list()[0].label == "one"  # `m3agent undo --list` opens it
    assert private(tmp_path / "home/checkpoints") == []


def test_settings_fix_the_home_and_the_config_file(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    cfg = home / "config.toml"
    cfg.write_text('engine = "scripted"\n')
    os.chmod(home, 0o755)
    os.chmod(cfg, 0o644)
    s = load_settings({"M3AGENT_HOME": str(home)})
    assert s.engine == "scripted"
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600


def test_a_shared_sticky_directory_is_never_changed(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp: M3AGENT_HOME pointed at it by mistake
    load_settings({"M3AGENT_HOME": str(shared)})
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777


def test_a_real_run_leaves_only_private_files(tmp_path):
    """`m3agent run` (the installed console script) with an edit (so a checkpoint), umask 022."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\n")
    call = calls(invoke("edit_file", path="a.py", old_string="1", new_string="2"))
    script = tmp_path / "s.json"
    script.write_text(json.dumps([call, answer("done")]))
    home = tmp_path / "m3home"
    r = run_cli(home, *scripted_run("go", script, ws), command=CONSOLE_SCRIPT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (ws / "a.py").read_text() == "x = 2\n"
    assert stat.S_IMODE(os.stat(ws / "a.py").st_mode) == 0o644  # the workspace keeps its modes
    assert any((home / "sessions").iterdir()) and any((home / "checkpoints").iterdir())
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert private(home / "sessions") == [] and private(home / "checkpoints") == []
