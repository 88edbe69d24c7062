"""The one glob translator, in both dialects: gitignore (ignore files, glob, grep) and the
per-path tool rules (agent/path_rules.py)."""

from __future__ import annotations

import re

from m3agent.tools.globs import glob_to_regex


def _full(pattern: str, path: str, **kw: bool) -> bool:
    return re.fullmatch(glob_to_regex(pattern, **kw), path) is not None


def test_shared_wildcards():
    for kw in ({}, {"dir_itself": True, "classes": False}):
        assert _full("**/*.md", "README.md", **kw) and _full("**/*.md", "d/e/x.md", **kw)
        assert _full("src/*", "src/a.py", **kw) and not _full("src/*", "src/a/b.py", **kw)
        assert _full("a?c", "abc", **kw) and not _full("a?c", "a/c", **kw)
        assert _full("x.py", "x.py", **kw) and not _full("x.py", "xapy", **kw)


def test_trailing_double_star():
    # gitignore: `build/**` is what is inside build; a rule's `src/**` covers src too.
    assert _full("build/**", "build/x.o") and not _full("build/**", "build")
    assert _full("src/**", "src/a/b.py", dir_itself=True) and _full(
        "src/**", "src", dir_itself=True
    )


def test_brackets():
    assert _full("[ab].py", "a.py") and not _full("[ab].py", "c.py")
    assert _full("[!ab].py", "c.py") and not _full("[!ab].py", "a.py")
    assert _full("[ab", "[ab")  # an unclosed bracket is literal
    assert _full("app/[id].tsx", "app/[id].tsx", classes=False)
    assert not _full("app/[id].tsx", "app/i.tsx", classes=False)
