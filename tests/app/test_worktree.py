"""`--worktree NAME` (Claude Code's): `m3agent run` through the installed console script
works in `.m3agent/worktrees/NAME` on its own branch, made once and reused; the main
checkout's files and `git status` stay as they were. Outside a repository: one line, exit 2."""

from __future__ import annotations

import json
import subprocess

import pytest
from m3agent.app import exit_codes

from ..support.cli import CONSOLE_SCRIPT, run_cli
from ..support.markup import answer, calls, invoke


def git(repo, *args: str) -> str:
    out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    return out.stdout.decode()


def test_run_in_a_worktree_made_once_then_reused(cli, repo, home):
    fix = invoke("edit_file", path="greet.py", old_string='"helo"', new_string='"hello"')
    script = cli.script(calls(fix), answer("fixed"), answer("again"))
    flags = ("--worktree", "fix-1", "--approval", "never", "--output-format", "json")
    args = ("run", "fix it", "--engine", "scripted", "--script", str(script), *flags)
    r = run_cli(home, *args, cwd=repo, command=CONSOLE_SCRIPT, timeout=60)
    assert r.returncode == exit_codes.OK, r.stderr
    tree = repo / ".m3agent" / "worktrees" / "fix-1"
    assert f"worktree {tree} (branch worktree-fix-1): created" in r.stderr
    assert (tree / "greet.py").read_text() == 'def greet():\n    return "hello"\n'
    assert (repo / "greet.py").read_text() == 'def greet():\n    return "helo"\n'  # untouched
    assert git(repo, "status", "--porcelain") == ""  # the worktrees are excluded
    assert "worktree-fix-1" in git(repo, "branch", "--list", "worktree-fix-1")
    first = json.loads(r.stdout)["session_id"]

    # again from the main checkout: the same worktree, and -c continues its last session
    r = run_cli(home, *args, "-c", cwd=repo, command=CONSOLE_SCRIPT, timeout=60)
    assert r.returncode == exit_codes.OK, r.stderr
    assert f"worktree {tree} (branch worktree-fix-1): reused" in r.stderr
    assert json.loads(r.stdout)["session_id"] == first


def test_worktree_outside_a_repository_or_with_a_bad_name(cli, repo, tmp_path, home):
    plain = tmp_path / "plain"
    plain.mkdir()
    script = cli.script(answer("never"))
    base = ("--engine", "scripted", "--script", str(script), "--output-format", "json")
    r = run_cli(home, "run", "x", *base, "-w", "a", cwd=plain, command=CONSOLE_SCRIPT)
    assert r.returncode == exit_codes.USAGE_ERROR
    assert r.stderr == f"error: --worktree needs a git repository: {plain} is not in one\n"
    assert json.loads(r.stdout)["exit_code"] == exit_codes.USAGE_ERROR
    # the TUI's flag, checked before the screen opens
    r = run_cli(home, "--worktree", "../up", "--cwd", str(plain), command=CONSOLE_SCRIPT)
    assert r.returncode == exit_codes.USAGE_ERROR
    assert (
        r.stderr.startswith("error: --worktree '../up': use letters") and r.stderr.count("\n") == 1
    )
    assert not list(plain.iterdir())
    # in a repository but with no terminal for the screen: said, and nothing is made
    r = run_cli(home, "-w", "tui-1", "--cwd", str(repo), command=CONSOLE_SCRIPT)
    assert r.returncode == exit_codes.USAGE_ERROR and "needs a terminal" in r.stderr
    assert not (repo / ".m3agent").exists()


def test_a_committed_worktrees_link_does_not_place_a_worktree_outside(make_repo, tmp_path):
    """Issue 36, round 5: a repository commits `.m3agent/worktrees` as a symlink (git keeps
    links) to a directory outside it; `--worktree NAME` checked the repository's files out
    there, and a link named NAME made the session run where it led. Refused, one line,
    nothing made outside. Control: the same link followed by git writes outside."""
    from m3agent.app.worktree import WorktreeError, enter_worktree

    outside = tmp_path / "outside"
    outside.mkdir()
    repo = make_repo({"a.txt": "a\n"})
    (repo / ".m3agent").mkdir()
    (repo / ".m3agent" / "worktrees").symlink_to(outside)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "planted")
    with pytest.raises(WorktreeError, match=r"worktrees is a symlink: worktrees are made"):
        enter_worktree(repo, "feature")
    assert list(outside.iterdir()) == []

    (repo / ".m3agent" / "worktrees").unlink()  # a real directory, a link named NAME in it
    (repo / ".m3agent" / "worktrees").mkdir()
    (repo / ".m3agent" / "worktrees" / "feature").symlink_to(outside)
    with pytest.raises(WorktreeError, match=r"feature is a symlink"):
        enter_worktree(repo, "feature")

    # control: git itself follows the link and checks the files out outside
    (repo / ".m3agent" / "worktrees" / "feature").unlink()
    (repo / ".m3agent" / "worktrees").rmdir()
    (repo / ".m3agent" / "worktrees").symlink_to(outside)
    git(repo, "worktree", "add", "-q", str(repo / ".m3agent" / "worktrees" / "f2"))
    assert (outside / "f2" / "a.txt").read_text() == "a\n"
