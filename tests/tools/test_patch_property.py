"""Property: a unified diff made by difflib (and the same change as a Codex envelope) applies
back to exactly the target text, whatever the texts."""

from __future__ import annotations

import difflib
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
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


def _occurrences(lines: list[str], seq: list[str]) -> int:
    n = len(seq)
    return sum(lines[i : i + n] == seq for i in range(len(lines) - n + 1)) if n else 2


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(old=LINES, new=LINES)
def test_envelope_round_trip(old, new):
    """The envelope has no line numbers: a hunk is placed where its context and removed lines
    are found (Codex's rule), and one that reaches the end of the file says so (`*** End of
    File`). The property holds for hunks that can be found in one place only; a hunk whose
    lines occur twice is ambiguous in the format itself (Codex's applier takes the first)."""
    a, b = "\n".join(old) + "\n", "\n".join(new) + "\n"
    hunks: list[list[str]] = []
    for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=3):
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("@@"):
            hunks.append([])
        else:
            hunks[-1].append(line)
    if not hunks:
        return
    body = []
    for hunk in hunks:
        old_side = [ln[1:] for ln in hunk if ln[:1] in (" ", "-")]
        assume(_occurrences(a.splitlines(), old_side) == 1)
        ends = old_side == a.splitlines()[len(a.splitlines()) - len(old_side) :]
        body += ["@@", *hunk] + (["*** End of File"] if ends else [])
    patch = "*** Begin Patch\n*** Update File: f.txt\n" + "\n".join(body) + "\n*** End Patch"
    err, out = _apply(a, patch)
    assert not err and out == b


def test_an_end_of_file_hunk_lands_at_the_end_even_when_its_context_repeats():
    """Hypothesis's find: `b b b` then `+a` occurs twice in a a b b b b; without an anchor the
    first place is taken (the format's ambiguity); `*** End of File` puts it at the end."""
    a = "a\na\nb\nb\nb\nb\n"
    hunk = "@@\n b\n b\n b\n+a\n"
    err, out = _apply(
        a, f"*** Begin Patch\n*** Update File: f.txt\n{hunk}*** End of File\n*** End Patch"
    )
    assert not err and out == a + "a\n"
    err, out = _apply(a, f"*** Begin Patch\n*** Update File: f.txt\n{hunk}*** End Patch")
    assert not err and out == "a\na\nb\nb\nb\na\nb\n"  # control: the first place
