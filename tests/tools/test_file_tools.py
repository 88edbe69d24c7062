"""File tools through the Toolset: happy paths and the bad inputs of issue 3 (clear errors,
nothing changed)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.toolset import default_toolset
from sandbox_support import unprobed


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def f():\n    return 1\n\ndef g():\n    return 1\n")
    return root


@pytest.fixture
def run(ws):
    ts = default_toolset()
    ctx = ToolContext(cwd=ws)
    return lambda name, **args: ts.dispatch(name, args, ctx)


def _tree(root):
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None, p.stat().st_mode)
        for p in sorted(root.rglob("*"))
    }


def test_read_file_with_line_numbers_and_range(run):
    r = run("read_file", path="src/app.py", offset=2, limit=2)
    assert not r.is_error
    assert r.output.splitlines()[:2] == ["     2\t    return 1", "     3\t"]
    assert "truncated" in r.output


def test_read_missing_file_is_clear(run):
    r = run("read_file", path="src/nope.py")
    assert r.is_error and r.output == "src/nope.py: no such file"


def test_read_binary_file_is_refused(run, ws):
    (ws / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02" * 100)
    r = run("read_file", path="blob.bin")
    assert r.is_error and "binary file" in r.output


def test_read_50mb_file_needs_a_range(run, ws):
    big = ws / "big.log"
    with open(big, "wb") as f:
        line = b"x" * 99 + b"\n"
        f.write(line * (50 * 1024 * 1024 // 100))
    r = run("read_file", path="big.log")
    assert r.is_error and "too large" in r.output and "offset" in r.output
    r = run("read_file", path="big.log", offset=100_000, limit=3)
    assert not r.is_error and r.output.startswith("100000\t" + "x" * 99)


def test_read_non_utf8_is_marked(run, ws):
    (ws / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    r = run("read_file", path="latin1.txt")
    assert not r.is_error and "caf\ufffd" in r.output and "not valid UTF-8" in r.output


def test_edit_non_utf8_refused_and_unchanged(run, ws):
    data = "café = 1\n".encode("latin-1")
    (ws / "latin1.py").write_bytes(data)
    r = run("edit_file", path="latin1.py", old_string="= 1", new_string="= 2")
    assert r.is_error and "not valid UTF-8" in r.output
    assert (ws / "latin1.py").read_bytes() == data


def test_edit_non_unique_match_changes_nothing(run, ws):
    before = _tree(ws)
    r = run("edit_file", path="src/app.py", old_string="return 1", new_string="return 2")
    assert r.is_error and "occurs 2 times" in r.output
    assert _tree(ws) == before


def test_edit_unique_returns_diff_and_keeps_mode(run, ws):
    p = ws / "src" / "app.py"
    os.chmod(p, 0o751)
    r = run(
        "edit_file",
        path="src/app.py",
        old_string="def g():\n    return 1",
        new_string="def g():\n    return 2",
    )
    assert not r.is_error
    assert "-    return 1\n+    return 2" in r.metadata["diff"]
    assert stat.S_IMODE(p.stat().st_mode) == 0o751
    assert p.read_text().endswith("return 2\n")
    assert not [x for x in p.parent.iterdir() if x.name.endswith(".m3tmp")]


def test_edit_missing_text(run):
    r = run("edit_file", path="src/app.py", old_string="nope", new_string="x")
    assert r.is_error and "not found" in r.output


def test_write_file_creates_dirs_and_guards_paths(run, ws, tmp_path):
    r = run("write_file", path="pkg/new/mod.py", content="x = 1\n")
    assert not r.is_error and (ws / "pkg/new/mod.py").read_text() == "x = 1\n"
    for bad in ("../escape.txt", str(tmp_path / "escape.txt"), ".git/config", "/etc/passwd"):
        r = run("write_file", path=bad, content="x")
        assert r.is_error and r.metadata["blocked_by"] == "path_guard", bad
    assert not (tmp_path / "escape.txt").exists()


def test_symlink_out_of_workspace_is_resolved_first(run, ws, tmp_path):
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", ws / "link")
    r = run("write_file", path="link/x.txt", content="x")
    assert r.is_error and "outside the writable roots" in r.output
    assert not (tmp_path / "outside" / "x.txt").exists()


def test_secret_paths_unreadable_by_tools(run, ws, tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("KEY")
    (tmp_path / ".env").write_text("TOKEN=1")
    monkeypatch.setenv("HOME", str(home))
    for p in (str(home / ".ssh" / "id_rsa"), "~/.ssh/id_rsa", "../.env"):
        r = run("read_file", path=p)
        assert r.is_error and "secret" in r.output, p
    (ws / ".env").write_text("LOCAL=1")  # the project's own .env is the user's workspace
    assert not run("read_file", path=".env").is_error


def test_list_dir_and_glob_respect_gitignore(run, ws):
    (ws / ".gitignore").write_text("build/\n*.log\n!keep.log\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.py").write_text("")
    (ws / "a.log").write_text("")
    (ws / "keep.log").write_text("")
    r = run("list_dir", path=".")
    assert r.output.splitlines() == [".gitignore", "a.log", "build/", "keep.log", "src/"]
    r = run("glob", pattern="**/*.py")
    assert r.output.splitlines() == ["src/app.py"]
    r = run("glob", pattern="*.log")
    assert r.output.splitlines() == ["keep.log"]
    r = run("glob", pattern="**/*.py", include_ignored=True)
    assert r.output.splitlines() == ["build/out.py", "src/app.py"]


def test_grep_python_fallback_caps_and_ignores(ws):
    ts = default_toolset(use_ripgrep=False)
    ctx = ToolContext(cwd=ws)
    (ws / ".gitignore").write_text("vendor/\n")
    (ws / "vendor").mkdir()
    (ws / "vendor" / "lib.py").write_text("return 1\n")
    (ws / "many.txt").write_text("hit\n" * 500)
    r = ts.dispatch("grep", {"pattern": r"return \d"}, ctx)
    assert r.output.splitlines() == ["src/app.py:2:    return 1", "src/app.py:5:    return 1"]
    r = ts.dispatch("grep", {"pattern": "hit", "max_matches": 10}, ctx)
    assert len(r.output.splitlines()) == 11 and "truncated at 10" in r.output
    r = ts.dispatch("grep", {"pattern": "(unclosed"}, ctx)
    assert r.is_error and "invalid regular expression" in r.output


def test_read_only_mode_blocks_writes(ws):
    from m3agent.tools.sandbox.policy import SandboxPolicy

    ctx = ToolContext(cwd=ws, sandbox=unprobed(SandboxPolicy(workspace=ws, mode="read-only")))
    r = default_toolset().dispatch("write_file", {"path": "x.txt", "content": "x"}, ctx)
    assert r.is_error and "read-only" in r.output and not (ws / "x.txt").exists()


@pytest.mark.parametrize("use_rg", [True, False], ids=["ripgrep", "python"])
def test_grep_engines_agree_and_hide_secrets(ws, tmp_path, monkeypatch, use_rg):
    import shutil

    if use_rg and not shutil.which("rg"):
        pytest.skip("ripgrep is not installed here (the Python fallback is tested)")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("needle-secret\n")
    (home / "notes.txt").write_text("needle-public\n")
    monkeypatch.setenv("HOME", str(home))
    (ws / ".gitignore").write_text("gen/\n")
    (ws / "gen").mkdir()
    (ws / "gen" / "x.py").write_text("needle\n")
    (ws / "src" / "b.py").write_text("a\nneedle here\n")
    ts = default_toolset(use_ripgrep=use_rg)
    ctx = ToolContext(cwd=ws)
    r = ts.dispatch("grep", {"pattern": "needle", "glob": "*.py"}, ctx)
    assert r.metadata["engine"] == ("rg" if use_rg else "python")
    assert r.output.splitlines() == ["src/b.py:2:needle here"]
    r = ts.dispatch("grep", {"pattern": "needle", "path": str(home)}, ctx)
    assert "needle-public" in r.output and "needle-secret" not in r.output
    r = ts.dispatch("glob", {"pattern": "**/*", "path": str(home)}, ctx)
    assert "id_rsa" not in r.output and "notes.txt" in r.output


@pytest.mark.skipif(shutil.which("rg") is None, reason="ripgrep not installed")
def test_round5_grep_arguments_that_look_like_options_are_patterns(tmp_path):
    """Issue 36, round 5 (held): ripgrep's `--pre=CMD` runs CMD on the host for every file,
    `-f FILE` reads patterns from a file, `--glob` values and paths starting with `-` could
    be options; the model's pattern follows `-e` and the path `--`. Control: the same
    pattern given to rg as an argument of its own runs the program."""
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = tmp_path / "ran"
    (ws / "x.sh").write_text(f'#!/bin/sh\ntouch {marker}\ncat "$1"\n')
    os.chmod(ws / "x.sh", 0o755)
    (ws / "a.txt").write_text("hello\n")
    ts, ctx = default_toolset(), ToolContext(cwd=ws)
    for pattern in (f"--pre={ws / 'x.sh'}", "-f/etc/hostname", "--files"):
        r = ts.dispatch("grep", {"pattern": pattern}, ctx)
        assert r.metadata.get("engine") == "rg" and r.output == "(no matches)", pattern
    r = ts.dispatch("grep", {"pattern": "hello", "glob": f"--pre={ws / 'x.sh'}"}, ctx)
    assert not marker.exists() and r.output == "(no matches)"
    subprocess.run(["rg", f"--pre={ws / 'x.sh'}", "hello", str(ws)], capture_output=True)
    assert marker.exists()  # control
