"""Issue 21 item 9 (hard links) and issue 27 item 5 (temp files left by a killed edit).

A hard link in the workspace to a secret outside it (`backup.ini` -> `~/.aws/credentials`)
is the same inode under a harmless name: no path check can see it. Every reading tool
refuses regular files with other names (st_nlink > 1), as the snapshot does, unless they lie
under a `hardlink_allow` directory; the control is that allow rule, under which the secret
comes back.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.toolset import default_toolset
from sandbox_support import unprobed

SECRET = "aws_secret_access_key = LINKED-SECRET"


@pytest.fixture
def linked(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = Path(tempfile.mkdtemp(prefix="m3-link-", dir="/var/tmp"))
    creds = outside / "credentials"
    creds.write_text(SECRET + "\n")
    os.link(creds, ws / "backup.ini")
    (ws / "plain.ini").write_text("x = 1\n")
    yield ws, creds
    creds.unlink()


def _ctx(ws: Path, **kw) -> ToolContext:
    return ToolContext(cwd=ws, sandbox=unprobed(SandboxPolicy(workspace=ws, **kw)))


CALLS = {
    "read_file": {"path": "backup.ini"},
    "edit_file": {"path": "backup.ini", "old_string": "LINKED", "new_string": "x"},
    "write_file": {"path": "backup.ini", "content": "new\n"},
    "grep": {"pattern": "LINKED"},
    "grep_python": {"pattern": "LINKED"},
    "apply_patch": {
        "patch": "*** Begin Patch\n*** Update File: backup.ini\n@@\n-"
        + SECRET
        + "\n+x\n*** End Patch\n"
    },
}


def _dispatch(tool: str, ctx: ToolContext):
    ts = default_toolset()
    if tool == "grep_python":
        from m3agent.tools.grep import Grep

        return Grep(use_ripgrep=False).run(Grep.Args(**CALLS[tool]), ctx)
    return ts.dispatch(tool, CALLS[tool], ctx)


@pytest.mark.parametrize("tool", sorted(CALLS))
def test_hard_link_to_outside_secret_is_not_read(linked, tool):
    ws, creds = linked
    r = _dispatch(tool, _ctx(ws))
    assert SECRET not in r.output and "LINKED" not in r.output
    assert "LINKED" not in str(r.metadata.get("diff", ""))
    if not tool.startswith("grep"):
        assert r.is_error and "hard links" in r.output
    assert creds.read_text() == SECRET + "\n"  # and the outside file is unchanged


@pytest.mark.parametrize("tool", ["read_file", "grep", "grep_python"])
def test_control_hard_link_read_under_allow_rule(linked, tool):
    ws, _ = linked
    r = _dispatch(tool, _ctx(ws, hardlink_allow=(str(ws),)))
    assert "LINKED-SECRET" in r.output


def test_plain_files_beside_the_link_still_work(linked):
    ws, _ = linked
    ts = default_toolset()
    r = ts.dispatch("read_file", {"path": "plain.ini"}, _ctx(ws))
    assert not r.is_error and "x = 1" in r.output


# -- temp files: a SIGKILL during a large edit_file ---------------------------------------

_EDITOR = r"""
import sys
from pathlib import Path
from m3agent.tools.base import ToolContext
from m3agent.tools.toolset import default_toolset
ws = Path(sys.argv[1]); ts = default_toolset(); ctx = ToolContext(cwd=ws)
print("ready", flush=True)
for i in range(100000):
    a, b = ("AAAA", "BBBB") if i % 2 == 0 else ("BBBB", "AAAA")
    r = ts.dispatch("edit_file", {"path": "big.txt", "old_string": a, "new_string": b}, ctx)
    assert not r.is_error, r.output
"""

# The old write (a named temp file in the target's directory, then rename), as a control.
_OLD_WRITER = r"""
import os, sys, tempfile
from pathlib import Path
p = Path(sys.argv[1]) / "big.txt"
data = p.read_bytes()
print("ready", flush=True)
while True:
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".m3tmp", dir=p.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data); f.flush(); os.fsync(f.fileno())
    os.replace(tmp, p)
"""

BIG = 16 * 1024 * 1024


def _kill_runs(ws: Path, script: str, runs: int) -> list[list[str]]:
    left = []
    for _ in range(runs):
        proc = subprocess.Popen(
            [sys.executable, "-c", script, str(ws)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(random.uniform(0.05, 0.4))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        left.append(sorted(n for n in os.listdir(ws) if n != "big.txt"))
    return left


@pytest.fixture
def big(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "big.txt").write_bytes(b"AAAA\n" + b"x" * BIG + b"\n")
    return ws


def test_sigkill_during_large_edit_leaves_no_temp_file(big):
    left = _kill_runs(big, _EDITOR, runs=8)
    assert all(names == [] for names in left), left
    data = (big / "big.txt").read_bytes()
    assert len(data) == BIG + 6 and data[:4] in (b"AAAA", b"BBBB")  # old or new, whole


def test_control_named_temp_file_is_left_behind(big):
    left = _kill_runs(big, _OLD_WRITER, runs=8)
    assert any(any(n.endswith(".m3tmp") for n in names) for names in left), left


def test_sweep_removes_only_stale_temp_files_of_that_name(tmp_path):
    """Where O_TMPFILE is missing the named temp file is the fallback; a killed write's
    leftover is removed by the next write of that name (after a minute), nothing else is."""
    from m3agent.tools import fdio

    old = tmp_path / ".big.txt.dead.m3tmp"
    fresh = tmp_path / ".big.txt.live.m3tmp"
    other = tmp_path / ".other.txt.dead.m3tmp"
    for p in (old, fresh, other):
        p.write_text("partial")
    os.utime(old, (time.time() - 3600,) * 2)
    os.utime(other, (time.time() - 3600,) * 2)
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert fdio.sweep_temps(dfd, "big.txt") == [old.name]
    finally:
        os.close(dfd)
    assert not old.exists() and fresh.exists() and other.exists()
