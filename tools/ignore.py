"""Ignore files (.gitignore, .ignore) and a walker that respects them.

A compact subset of gitignore: comments, `!` negation, trailing `/` for directories,
anchored patterns (a `/` before the end), `*`, `?`, `[...]` and `**`. Nested ignore files
apply below their own directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .globs import glob_to_regex
from .host_read import ReadRefused, default_reader

IGNORE_FILES = (".gitignore", ".ignore")
ALWAYS_SKIPPED = {".git", ".hg", ".svn", ".m3agent"}


@dataclass(frozen=True, slots=True)
class _Rule:
    base: str  # directory (relative to the walk root, "" for root) the rule was defined in
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def parse_rules(text: str, base: str) -> list[_Rule]:
    rules = []
    for line in text.splitlines():
        line = line.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/")
        body = glob_to_regex(line)
        regex = f"^{body}$" if anchored else f"^(?:.*/)?{body}$"
        rules.append(_Rule(base, re.compile(regex), negate, dir_only))
    return rules


# An ignore file is the repository's: read under the host read policy, so a `.gitignore` that
# is a link to /dev/zero, a FIFO or a huge file is no rules, not a hang or a MemoryError.
MAX_IGNORE_BYTES = 1_000_000


class IgnoreMatcher:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._rules: dict[str, list[_Rule]] = {}
        self._reader = default_reader(root)

    def load_dir(self, rel_dir: str) -> None:
        rules: list[_Rule] = []
        for name in IGNORE_FILES:
            f = self.root / rel_dir / name
            if not os.path.lexists(f):
                continue
            try:
                data = self._reader.read_bytes(f, MAX_IGNORE_BYTES)
            except ReadRefused:
                continue
            rules += parse_rules(data.decode("utf-8", errors="replace"), rel_dir)
        self._rules[rel_dir] = rules

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        result = False
        parts = rel_path.split("/")
        # Rules from outer directories first, inner ones override (last match wins).
        for depth in range(len(parts)):
            base = "/".join(parts[:depth])
            for rule in self._rules.get(base, ()):
                sub = "/".join(parts[depth:])
                if rule.dir_only and not is_dir:
                    continue
                if rule.regex.match(sub):
                    result = not rule.negate
        return result


def walk(root: Path, respect_ignore: bool = True, cap: int = 100_000) -> Iterator[tuple[str, bool]]:
    """Yield (path relative to root, is_dir), depth first in sorted order, pruning ignored dirs."""
    matcher = IgnoreMatcher(root)
    count = 0
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        if respect_ignore:
            matcher.load_dir(rel_dir)
        try:
            entries = sorted(os.scandir(root / rel_dir), key=lambda e: e.name)
        except OSError:
            continue
        subdirs = []
        for e in entries:
            if e.name in ALWAYS_SKIPPED:
                continue
            rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
            is_dir = e.is_dir(follow_symlinks=False)
            if respect_ignore and matcher.ignored(rel, is_dir):
                continue
            yield rel, is_dir
            count += 1
            if count >= cap:
                return
            if is_dir:
                subdirs.append(rel)
        stack.extend(reversed(subdirs))
