"""Ordered gitignore rules, each tagged with the reason it gives (files.py's skip rules and the
secret deny-list); the last rule that matches wins."""

from __future__ import annotations

import re
from typing import Protocol

from m3agent.tools.ignore import parse_rules

_ANY_DIR = "^(?:.*/)?"  # how tools/ignore.py opens the regex of a pattern without a "/"


class _Rule(Protocol):
    """What this module reads of a rule from tools.ignore.parse_rules."""

    @property
    def regex(self) -> re.Pattern[str]: ...
    @property
    def negate(self) -> bool: ...
    @property
    def dir_only(self) -> bool: ...


class Patterns:
    """Ordered gitignore rules, each tagged with the reason it gives; last match wins.

    A rule matches a file when it matches the path itself or (directory rules too) one of its
    parent directories. Directory results are cached and one combined regex rejects most
    paths at once: 10,000 files must not cost 10,000 x rules regex calls.
    """

    def __init__(self) -> None:
        self._rules: list[tuple[_Rule, str]] = []
        self._any: re.Pattern[str] | None = None
        self._anchored: list[int] = []
        self._any_name: re.Pattern[str] = re.compile("(?!)")
        self._dirs: dict[str, int] = {}
        self._bases: dict[tuple[str, bool], int] = {}

    def add(self, patterns: tuple[str, ...] | list[str], reason: str) -> None:
        for rule in parse_rules("\n".join(patterns), ""):
            self._rules.append((rule, reason))
        self._any = None
        self._dirs = {}
        self._bases = {}

    def _prepare(self) -> re.Pattern[str]:
        # A rule without a "/" (tools/ignore.py's `^(?:.*/)?...$`) matches a name at any depth:
        # its answer depends on the last component only, so it is cached per name. The few
        # anchored rules are matched against whole paths, behind one combined regex.
        self._anchored = [
            k for k, (r, _) in enumerate(self._rules) if not r.regex.pattern.startswith(_ANY_DIR)
        ]
        pats = [f"(?:{self._rules[k][0].regex.pattern})" for k in self._anchored]
        self._any = re.compile("|".join(pats) or "(?!)")
        names = [
            f"(?:{r.regex.pattern})" for r, _ in self._rules if r.regex.pattern.startswith(_ANY_DIR)
        ]
        self._any_name = re.compile("|".join(names) or "(?!)")  # rejects most names at once
        return self._any

    def _by_name(self, name: str, is_dir: bool) -> int:
        hit = self._bases.get((name, is_dir))
        if hit is None:
            hit = -1
            for k in () if not self._any_name.match(name) else range(len(self._rules) - 1, -1, -1):
                rule = self._rules[k][0]
                if rule.regex.pattern.startswith(_ANY_DIR) and (is_dir or not rule.dir_only):
                    if rule.regex.match(name):
                        hit = k
                        break
            self._bases[(name, is_dir)] = hit
        return hit

    def _last(self, path: str, is_dir: bool) -> int:
        combined = self._any if self._any is not None else self._prepare()
        k = self._by_name(path.rsplit("/", 1)[-1], is_dir)
        if self._anchored and combined.match(path):
            for j in reversed(self._anchored):
                if j <= k:
                    break
                rule = self._rules[j][0]
                if (is_dir or not rule.dir_only) and rule.regex.match(path):
                    return j
        return k

    def _dir_last(self, d: str) -> int:
        hit = self._dirs.get(d)
        if hit is None:
            parent = d.rsplit("/", 1)[0] if "/" in d else ""
            hit = max(self._dir_last(parent) if parent else -1, self._last(d, True))
            self._dirs[d] = hit
        return hit

    def reason(self, rel: str) -> str | None:
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        k = max(self._dir_last(parent) if parent else -1, self._last(rel, False))
        if k < 0:
            return None
        rule, why = self._rules[k]
        return None if rule.negate else why
