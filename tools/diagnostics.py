"""Diagnostics after edits: a checker the user configured runs, under the session's sandbox,
on the files a tool call just changed (its result's `paths_changed`), and what it reports is
appended to that call's result, so the model sees it in the same turn.

```toml
[diagnostics]
command = "ruff check --quiet --output-format=concise {files}"  # any changed file
timeout_s = 60                                             # per checker run
max_chars = 4000                                           # of findings per call

[diagnostics.extensions]                                   # by file extension, before command
ts = "npx tsc --noEmit --pretty false"
rs = "cargo check --quiet --message-format=short"
```

`{files}` becomes the changed files (workspace-relative, shell-quoted) of that checker; a
command without it checks the whole project, and only its lines that name a changed file are
kept. A file with neither its extension's command nor `command` is not checked.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .base import ToolContext, ToolResult
from .sandbox.budget import WriteBudgetSpent

FILES = "{files}"
MAX_CHARS_LIMIT = 50_000


@dataclass(frozen=True, slots=True)
class DiagnosticsConfig:
    command: str | None = None
    extensions: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    max_chars: int = 4000

    def __post_init__(self) -> None:
        if self.command is not None and (not isinstance(self.command, str) or not self.command):
            raise ValueError("[diagnostics] command must be a non-empty string")
        if not isinstance(self.extensions, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v
            for k, v in self.extensions.items()
        ):
            raise ValueError('[diagnostics.extensions] maps an extension to a command: py = "..."')
        object.__setattr__(
            self, "extensions", {k.lower().lstrip("."): v for k, v in self.extensions.items()}
        )
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)):
            raise ValueError("[diagnostics] timeout_s must be a number of seconds")
        if self.timeout_s <= 0:
            raise ValueError("[diagnostics] timeout_s must be positive")
        if isinstance(self.max_chars, bool) or not isinstance(self.max_chars, int):
            raise ValueError("[diagnostics] max_chars must be a whole number")
        if not 0 < self.max_chars <= MAX_CHARS_LIMIT:
            raise ValueError(f"[diagnostics] max_chars must be 1 to {MAX_CHARS_LIMIT}")
        if self.command is None and not self.extensions:
            raise ValueError("[diagnostics] needs a command or [diagnostics.extensions]")

    @classmethod
    def from_table(cls, table: dict[str, Any]) -> DiagnosticsConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(f"[diagnostics]: unknown setting(s) {', '.join(unknown)}")
        return cls(**table)

    def command_for(self, path: str) -> str | None:
        return self.extensions.get(Path(path).suffix.lower().lstrip("."), self.command)


@dataclass(frozen=True, slots=True)
class Finding:
    """One checker run: its command line, exit code and the findings kept."""

    command: str
    exit_code: int | None
    text: str
    note: str = ""  # the run itself went wrong: timed out, refused by the sandbox


class Diagnostics:
    def __init__(self, config: DiagnosticsConfig) -> None:
        self.config = config

    def annotate(self, result: ToolResult, ctx: ToolContext) -> ToolResult:
        """`result` with the findings for the files it changed appended (unchanged when the
        call failed or changed no file that a checker covers)."""
        changed = result.metadata.get("paths_changed")
        if result.is_error or not isinstance(changed, list) or not changed:
            return result
        files = _existing(changed, ctx.cwd)
        groups: dict[str, list[str]] = {}
        for rel in files:
            command = self.config.command_for(rel)
            if command is not None:
                groups.setdefault(command, []).append(rel)
        if not groups:
            return result
        found = [self._run(command, rels, ctx) for command, rels in groups.items()]
        text = _bounded(
            "\n".join(_shown(f, rels) for f, rels in zip(found, groups.values(), strict=True)),
            self.config.max_chars,
        )
        meta = [
            {"command": f.command, "exit_code": f.exit_code, "findings": bool(f.text)}
            for f in found
        ]
        return replace(
            result,
            output=f"{result.output}\n\n{text}",
            metadata={**result.metadata, "diagnostics": meta},
        )

    def _run(self, command: str, rels: Sequence[str], ctx: ToolContext) -> Finding:
        from .sandbox.runner import SandboxUnavailable

        quoted = " ".join(shlex.quote(r) for r in rels)
        line = command.replace(FILES, quoted)
        try:
            r = ctx.sandbox.run(
                line, cwd=ctx.cwd, timeout_s=self.config.timeout_s, cancel=ctx.cancel, env=ctx.env
            )
        except (SandboxUnavailable, WriteBudgetSpent) as e:
            return Finding(line, None, "", f"not run: {e}")
        output = "\n".join(t.rstrip("\n") for t in (r.stdout, r.stderr) if t.strip())
        if FILES not in command:  # a whole-project checker: only the lines about these files
            output = "\n".join(filter(_naming(rels, ctx.cwd).search, output.splitlines()))
        note = ""
        if r.timed_out:
            note = f"timed out after {self.config.timeout_s:g}s"
        elif r.cancelled:
            note = "interrupted"
        elif not r.started:
            note = "the sandbox could not start it"
        return Finding(line, r.exit_code, output.strip(), note)


def _naming(rels: Sequence[str], cwd: Path) -> re.Pattern[str]:
    """Matches a line that names one of the files as a whole path (`a.py:3:`, `./a.py`,
    `/ws/a.py`), not as the end of another name (`data.py` for `a.py`)."""
    names = "|".join(re.escape(n) for n in sorted({*rels, *(str(cwd / r) for r in rels)}))
    return re.compile(rf"(?:^|[\s'\"(=])(?:\./)?(?:{names})(?:$|[\s:'\"(),])")


def _existing(changed: list[Any], cwd: Path) -> list[str]:
    """The changed files that still exist (a deleted one has nothing to check), relative to
    the workspace where they lie in it."""
    out = []
    for raw in changed:
        p = Path(str(raw))
        p = p if p.is_absolute() else cwd / p
        if not p.is_file():
            continue
        try:
            out.append(str(p.relative_to(cwd)))
        except ValueError:
            out.append(str(p))
    return list(dict.fromkeys(out))


def _shown(f: Finding, rels: Sequence[str]) -> str:
    what = ", ".join(rels)
    if f.note:
        return f"[diagnostics: `{f.command}` {f.note}]" + (f"\n{f.text}" if f.text else "")
    if not f.text:
        return f"[diagnostics: no findings for {what} (`{f.command}`, exit {f.exit_code})]"
    return f"[diagnostics for {what} (`{f.command}`, exit {f.exit_code}):]\n{f.text}"


def _bounded(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    return text[:cap] + f"\n[... {len(text) - cap} more characters of diagnostics cut]"
