"""Checkpoints in a shadow git dir, and `m3agent undo` after an edit plus `rm -rf src`."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.checkpoint import CheckpointError, Checkpoints, state_dir_for
from m3agent.tools.sandbox.policy import LAYERS
from m3agent.tools.toolset import default_toolset

from ..support.cli import run_cli


@pytest.fixture
def repo(tmp_path):
    ws = tmp_path / "repo"
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "core.py").write_text("def answer():\n    return 41\n")
    (ws / "src" / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(ws / "src" / "run.sh", 0o755)
    (ws / "README.md").write_text("# demo\n")
    (ws / ".gitignore").write_text("build/\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    subprocess.run([*git, "add", "-A"], cwd=ws, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=ws, check=True)
    return ws


def _user_git_state(ws):
    def git(*a):
        return subprocess.run(["git", *a], cwd=ws, capture_output=True, text=True).stdout

    # (git status refreshes the index's stat cache itself, so compare its staged entries)
    return (
        git("rev-parse", "HEAD"),
        git("status", "--porcelain"),
        git("stash", "list"),
        git("ls-files", "--stage"),
        git("for-each-ref"),
    )


def _files(ws):
    return {
        str(p.relative_to(ws)): p.read_bytes()
        for p in sorted(ws.rglob("*"))
        if p.is_file() and ".git" not in p.parts
    }


def test_undo_after_edit_and_rm_rf_from_the_shell(repo, tmp_path):
    home = tmp_path / "m3home"
    before = _files(repo)
    git_before = _user_git_state(repo)
    cps = Checkpoints(repo, state_dir_for(repo, home / "checkpoints"))
    ts, ctx = default_toolset(), ToolContext(cwd=repo)
    cps.snapshot("before edit_file")  # what the agent loop does before a turn's first change
    r = ts.dispatch(
        "edit_file", {"path": "src/pkg/core.py", "old_string": "41", "new_string": "42"}, ctx
    )
    assert not r.is_error
    r = ts.dispatch("shell", {"command": "rm -rf src && echo new > notes.txt && ls"}, ctx)
    assert not r.is_error, r.output
    assert not (repo / "src").exists() and (repo / "notes.txt").exists()

    listed = run_cli(home, "undo", "--list", "--cwd", str(repo))
    assert listed.returncode == 0 and "before edit_file" in listed.stdout
    out = run_cli(home, "undo", "--cwd", str(repo))
    assert out.returncode == 0, out.stderr
    assert "restored" in out.stdout
    assert _files(repo) == before
    assert os.stat(repo / "src" / "run.sh").st_mode & 0o111
    assert _user_git_state(repo) == git_before  # the user's .git was never touched

    again = run_cli(home, "undo", "--cwd", str(repo))
    assert again.returncode == 2 and "nothing to undo" in again.stderr


def test_undo_steps_back_one_checkpoint_at_a_time(repo, tmp_path):
    cps = Checkpoints(repo, tmp_path / "state")
    f = repo / "README.md"
    cps.snapshot("turn 1")
    f.write_text("v2\n")
    cps.snapshot("turn 2")
    f.write_text("v3\n")
    assert [c.label for c in cps.list()] == ["turn 2", "turn 1"]
    cps.restore(cps.list()[0].id)
    assert f.read_text() == "v2\n" and [c.label for c in cps.list()] == ["turn 1"]
    cps.restore(cps.list()[0].id)
    assert f.read_text() == "# demo\n" and cps.list() == []


def test_ignored_files_are_not_snapshotted_nor_deleted(repo, tmp_path):
    cps = Checkpoints(repo, tmp_path / "state")
    cid = cps.snapshot("t")
    (repo / "build").mkdir()
    (repo / "build" / "artifact.o").write_text("obj")
    (repo / "created.txt").write_text("new")
    removed = cps.restore(cid)
    assert removed == ["created.txt"]
    assert (repo / "build" / "artifact.o").exists()  # ignored: left alone (documented)


def test_restore_unknown_id_is_a_clear_error(repo, tmp_path):
    cps = Checkpoints(repo, tmp_path / "state")
    cps.snapshot("t")
    with pytest.raises(CheckpointError, match="no checkpoint 'deadbeef'"):
        cps.restore("deadbeef")


def test_state_dir_is_per_workspace(tmp_path):
    a = state_dir_for(tmp_path / "a", tmp_path / "cp")
    b = state_dir_for(tmp_path / "b", tmp_path / "cp")
    assert a != b and a.parent == b.parent == tmp_path / "cp"


def test_doctor_reports_layers(tmp_path):
    out = run_cli(tmp_path, "doctor", "--json", "--cwd", str(tmp_path))
    report = json.loads(out.stdout)
    names = [layer["name"] for layer in report["layers"]]
    assert names == list(LAYERS)  # every layer, in the policy's order
    assert out.returncode == (0 if report["protected"] else 5)
    for layer in report["layers"]:
        assert layer["detail"], layer  # every layer says what it does or why it is off
    text = run_cli(tmp_path, "doctor", "--cwd", str(tmp_path)).stdout
    assert "sandbox mode: workspace-write" in text and "landlock" in text


def test_a_git_lock_left_by_a_killed_process_does_not_break_checkpoints(repo, tmp_path):
    """kill -9 during a checkpoint's `git add` leaves index.lock behind; the next checkpoint
    (under the store's own flock, so the lock is known stale) still works."""
    state = tmp_path / "state"
    cps = Checkpoints(repo, state)
    cps.snapshot("one")
    (state / "index.lock").write_text("")
    (state / "shadow.git" / "refs" / "m3agent" / "checkpoints.lock").write_text("")
    env = dict(
        os.environ,
        GIT_DIR=str(state / "shadow.git"),
        GIT_WORK_TREE=str(repo),
        GIT_INDEX_FILE=str(state / "index"),
    )
    plain = subprocess.run(["git", "add", "-A"], cwd=repo, env=env, capture_output=True, text=True)
    assert plain.returncode != 0 and "index.lock" in plain.stderr  # control: git refuses
    (repo / "README.md").write_text("# changed\n")
    cps.snapshot("two")
    assert [c.label for c in cps.list()] == ["two", "one"]


def test_undo_never_writes_through_a_directory_the_model_swapped_for_a_link(repo, tmp_path):
    """Issue 36, round 5 (held): after the checkpoint the model replaces `src/pkg` with a
    link to a directory outside (the home, ~/.config/autostart); the restore must bring the
    directory back, not write `core.py` through the link. git's checkout-index -f replaces
    the link with a directory. Control: the same path written by name lands outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    cp = Checkpoints(repo, tmp_path / "state")
    first = cp.snapshot("t1")
    for f in (repo / "src" / "pkg").iterdir():
        f.unlink()
    (repo / "src" / "pkg").rmdir()
    (repo / "src" / "pkg").symlink_to(outside)
    cp.restore(first)
    assert list(outside.iterdir()) == []
    assert not (repo / "src" / "pkg").is_symlink()
    assert (repo / "src" / "pkg" / "core.py").read_text() == "def answer():\n    return 41\n"
    (repo / "src" / "pkg2").symlink_to(outside)  # control
    (repo / "src" / "pkg2" / "core.py").write_text("x")
    assert (outside / "core.py").exists()
