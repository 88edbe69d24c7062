"""Per-path tool rules: `edit_file(src/**)`, Claude Code's `Edit(src/**)` shape.

A rule's pattern is a glob relative to the workspace root (`**` any depth, `*` and `?` within
one name), matched against each path the call declares (Tool.touches). Refused when parsed:
an absolute pattern, `~`, a `..` component, a backslash or NUL (a rule can only speak about
the workspace). When matched, a path counts for an allow rule only if it stays inside the
workspace both as written and with symlinks resolved, and both forms match the pattern; for a
deny or ask rule either form matching is enough, and a call that declares no paths at all
(unparsed arguments, an opaque tool) is taken as matching: deny fails closed, allow fails open
to the policy. A rule's tool stands for every built-in tool of its capability
(agent/approval_rules.py: covered_tools): `Read(secrets/**)` is about reading those files, with
read_file, grep, glob or list_dir alike.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from m3agent.tools.base import Capability
from m3agent.tools.claude_names import tools_named, tools_of
from m3agent.tools.globs import glob_to_regex

_RULE = re.compile(r"([^()\s]+)\((.*)\)")


@functools.cache
def _no_paths() -> frozenset[str]:
    """Our tools whose rules are not paths (the shell's are command prefixes), as each
    built-in tool declares it (tools/base.py: takes_paths)."""
    from m3agent.tools.toolset import default_toolset

    return frozenset(t.name for t in default_toolset().tools() if not t.takes_paths)


class RuleError(ValueError):
    """A rule that cannot be used; the message names the rule and why."""


@dataclass(frozen=True, slots=True)
class PathRule:
    tools: tuple[str, ...]  # names or globs, as ToolRule.tool
    pattern: str | None  # None: the whole tool

    @property
    def regex(self) -> re.Pattern[str] | None:
        return _compile(self.pattern) if self.pattern is not None else None


def tool_names(name: str) -> tuple[str, ...]:
    """Our tools a rule's tool names: Claude Code's names too (tools/claude_names.py)."""
    return tools_named(name)


def read_tools() -> tuple[str, ...]:
    """The tools that read workspace files: a path rule about reading covers them all."""
    return tools_of(Capability.READ)


def write_tools() -> tuple[str, ...]:
    """The tools that change workspace files."""
    return tools_of(Capability.WRITE)


def parse_rule(text: str, *, check: bool = True) -> PathRule:
    """`edit_file`, `mcp__*`, `edit_file(src/**)`, `Edit(docs/*.md)`. check=False skips the
    pattern checks (tests only: it shows what they stop)."""
    text = text.strip()
    m = _RULE.fullmatch(text)
    if m is None:
        if "(" in text or ")" in text:
            raise RuleError(f"rule {text!r}: write TOOL or TOOL(PATTERN)")
        return PathRule(tool_names(text), None)
    tool, pattern = m.group(1), m.group(2)
    tools = tool_names(tool)  # and the tools of the same capability: approval_rules.covered_tools
    if any(t in _no_paths() for t in tools):
        raise RuleError(
            f"rule {text!r}: {tool} takes command prefixes, not paths "
            "(shell_prefixes, or `p`/`s` in an approval)"
        )
    if check:
        check_pattern(pattern, text)
    return PathRule(tools, pattern)


def check_pattern(pattern: str, rule: str = "") -> None:
    rule = rule or pattern
    if not pattern:
        raise RuleError(f"rule {rule!r}: the path pattern is empty")
    if pattern.startswith(("/", "~")) or re.match(r"[A-Za-z]:", pattern):
        raise RuleError(f"rule {rule!r}: the pattern must be relative to the workspace")
    if "\\" in pattern or "\x00" in pattern:
        raise RuleError(f"rule {rule!r}: no backslash or NUL in a pattern")
    if ".." in pattern.split("/"):
        raise RuleError(f"rule {rule!r}: `..` would reach outside the workspace")


def _compile(pattern: str) -> re.Pattern[str]:
    # `src/**` covers `src` itself, and brackets are literal (tools/globs.py says why).
    return re.compile(glob_to_regex(pattern, dir_itself=True, classes=False), re.DOTALL)


@dataclass(frozen=True, slots=True)
class PathForms:
    """A declared path as written (normalised) and with symlinks resolved, each relative to
    the workspace (`../x` when outside) and absolute."""

    lexical: str
    resolved: str
    lexical_abs: str
    resolved_abs: str

    @property
    def inside(self) -> bool:
        return not any(_outside(p) for p in (self.lexical, self.resolved))


def _outside(rel: str) -> bool:
    return rel == ".." or rel.startswith("../") or os.path.isabs(rel)


def path_forms(path: str, workspace: Path) -> PathForms:
    root = os.path.normpath(str(workspace))
    real_root = os.path.realpath(root)
    given = path if os.path.isabs(path) else os.path.join(root, path)
    lexical = os.path.normpath(given)
    resolved = os.path.realpath(given)
    return PathForms(
        os.path.relpath(lexical, root),
        os.path.relpath(resolved, real_root),
        lexical,
        resolved,
    )


def matches(regex: re.Pattern[str], pattern: str, rel: str, absolute: str) -> bool:
    # An absolute pattern is refused when parsed; were one let through it would match here.
    return bool(regex.fullmatch(absolute if pattern.startswith("/") else rel))


def rule_covers(
    rule: PathRule,
    paths: tuple[str, ...] | None,
    workspace: Path | None,
    *,
    allow: bool,
    confine: bool = True,
) -> bool:
    """Whether a path rule applies to a call that declares `paths` (None: unknown).
    confine=False drops the workspace checks (tests only: the path as written, inside or not)."""
    if rule.pattern is None:
        return True
    if not paths or workspace is None:
        return not allow  # deny and ask fail closed; allow falls back to the policy
    regex = _compile(rule.pattern)
    forms = [path_forms(p, workspace) for p in paths]

    def hit(f: PathForms, resolved: bool) -> bool:
        rel, absolute = (f.resolved, f.resolved_abs) if resolved else (f.lexical, f.lexical_abs)
        return matches(regex, rule.pattern or "", rel, absolute)

    if not confine:
        return (all if allow else any)(hit(f, False) for f in forms)
    if allow:
        return all(f.inside and hit(f, False) and hit(f, True) for f in forms)
    return any(hit(f, False) or hit(f, True) for f in forms)
