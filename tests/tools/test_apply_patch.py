"""apply_patch: Codex envelope and unified diff; every hunk applies or nothing changes."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.toolset import default_toolset


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.py").write_text("import os\n\ndef main():\n    print('a')\n    return 0\n")
    (root / "b.py").write_text("x = 1\ny = 2\nz = 3\n")
    os.chmod(root / "b.py", 0o755)
    return root


def _apply(ws, patch):
    return default_toolset().dispatch("apply_patch", {"patch": patch}, ToolContext(cwd=ws))


def _snapshot(root):
    return {p.name: p.read_bytes() for p in root.iterdir()}


def test_envelope_add_update_delete_move(ws):
    patch = """*** Begin Patch
*** Add File: pkg/new.py
+VALUE = 42
*** Update File: a.py
@@ def main():
-    print('a')
+    print('b')
*** Update File: b.py
*** Move to: c.py
@@
 x = 1
-y = 2
+y = 20
*** End Patch"""
    r = _apply(ws, patch)
    assert not r.is_error, r.output
    assert (ws / "pkg/new.py").read_text() == "VALUE = 42\n"
    assert "print('b')" in (ws / "a.py").read_text()
    assert not (ws / "b.py").exists() and (ws / "c.py").read_text() == "x = 1\ny = 20\nz = 3\n"
    assert "+    print('b')" in r.metadata["diff"]


def test_unified_diff_from_git_applies_and_keeps_mode(ws):
    new = (ws / "b.py").read_text().replace("z = 3", "z = 30")
    (ws / "b2.py").write_text(new)
    diff = subprocess.run(
        ["git", "diff", "--no-index", "b.py", "b2.py"], cwd=ws, capture_output=True, text=True
    ).stdout
    diff = diff.replace("b/b2.py", "b/b.py")
    (ws / "b2.py").unlink()
    r = _apply(ws, diff)
    assert not r.is_error, r.output
    assert (ws / "b.py").read_text() == "x = 1\ny = 2\nz = 30\n"
    assert stat.S_IMODE((ws / "b.py").stat().st_mode) == 0o755


def test_one_bad_hunk_means_nothing_changes(ws):
    before = _snapshot(ws)
    patch = """*** Begin Patch
*** Update File: a.py
@@
-import os
+import sys
*** Update File: b.py
@@
-y = 999
+y = 3
*** End Patch"""
    r = _apply(ws, patch)
    assert r.is_error and "nothing changed" in r.output and "hunk 1 does not apply" in r.output
    assert "y = 999" in r.output
    assert _snapshot(ws) == before


def test_unified_diff_that_does_not_apply(ws):
    before = _snapshot(ws)
    diff = "--- a/b.py\n+++ b/b.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 7\n+y = 8\n"
    r = _apply(ws, diff)
    assert r.is_error and "does not apply" in r.output
    assert _snapshot(ws) == before


@pytest.mark.parametrize(
    "patch,msg",
    [
        ("hello", "not a patch"),
        ("*** Begin Patch\n*** Update File: a.py\n@@\n-import os\n+import re\n", "End Patch"),
        ("*** Begin Patch\n*** Add File: a.py\n+x\n*** End Patch", "already exists"),
        ("*** Begin Patch\n*** Delete File: missing.py\n*** End Patch", "no such file"),
        (
            "*** Begin Patch\n*** Add File: ../evil.py\n+x\n*** End Patch",
            "outside the writable roots",
        ),
        (
            "*** Begin Patch\n*** Update File: a.py\n@@\n?bad\n*** End Patch",
            "hunk lines start with",
        ),
    ],
)
def test_malformed_or_forbidden_patches(ws, patch, msg):
    before = _snapshot(ws)
    r = _apply(ws, patch)
    assert r.is_error and msg in r.output, r.output
    assert _snapshot(ws) == before
    assert not (ws.parent / "evil.py").exists()


def test_whitespace_tolerant_context(ws):
    patch = "*** Begin Patch\n*** Update File: b.py\n@@\n x = 1   \n-y = 2\n+y = 5\n*** End Patch"
    r = _apply(ws, patch)
    assert not r.is_error, r.output
    assert (ws / "b.py").read_text() == "x = 1\ny = 5\nz = 3\n"
