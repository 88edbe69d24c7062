"""Property: a unified diff made by difflib (and the same change as a Codex envelope) applies
back to exactly the target text, whatever the texts."""

from __future__ import annotations

import difflib
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from m3agent.tools.base import ToolContext
from m3agent.tools.toolset import default_toolset

LINES = st.lists(
    st.sampled_from(["a", "b", "c", "def f():", "    pass", "", "x = 1", "# c"]),
    min_size=1,
    max_size=30,
)


def _apply(text: str, patch: str) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory() as d:
        ws = Path(d)
        (ws / "f.txt").write_text(text)
        r = default_toolset(include=["apply_patch"]).dispatch(
            "apply_patch", {"patch": patch}, ToolContext(cwd=ws)
        )
        return r.is_error, (ws / "f.txt").read_text() if (ws / "f.txt").exists() else ""


@settings(max_examples=80, deadline=None)
@given(old=LINES, new=LINES)
def test_unified_diff_round_trip(old, new):
    a, b = "\n".join(old) + "\n", "\n".join(new) + "\n"
    diff = "".join(
        difflib.unified_diff(a.splitlines(True), b.splitlines(True), "a/f.txt", "b/f.txt")
    )
    if not diff:
        return
    err, out = _apply(a, diff)
    assert not err and out == b


@settings(max_examples=80, deadline=None)
@given(old=LINES, new=LINES)
def test_envelope_round_trip(old, new):
    a, b = "\n".join(old) + "\n", "\n".join(new) + "\n"
    body = []
    for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        body.append("@@" if line.startswith("@@") else line)
    if not body:
        return
    patch = "*** Begin Patch\n*** Update File: f.txt\n" + "\n".join(body) + "\n*** End Patch"
    err, out = _apply(a, patch)
    assert not err and out == b
