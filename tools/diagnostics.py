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

[diagnostics.lsp]                                          # a language server by extension
py = "pylsp"
ts = "typescript-language-server --stdio"
```

`{files}` becomes the changed files (workspace-relative, shell-quoted) of that checker; a
command without it checks the whole project, and only its lines that name a changed file are
kept. A file with neither its extension's command nor `command` is not checked.

A language server (tools/lsp/) is started once per session, under the same launch policy as
a checker (`_sandbox_for`), and is sent each changed file of its extensions; what it
publishes within `lsp_timeout_s` joins the result the same way. A file may have both.
"""

from __future__ import annotations

import re
import shlex
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .base import ToolContext, ToolResult
from .lsp.pool import LspPool
from .sandbox.budget import WriteBudgetSpent
from .sandbox.policy import SandboxLayer

if TYPE_CHECKING:
    from .sandbox.runner import Sandbox

FILES = "{files}"
MAX_CHARS_LIMIT = 50_000
_SERVER_CPU_S = 7 * 24 * 3600  # a language server lives for the session


@dataclass(frozen=True, slots=True)
class DiagnosticsConfig:
    command: str | None = None
    extensions: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 60.0
    max_chars: int = 4000
    lsp: dict[str, str] = field(default_factory=dict)  # extension -> language server command
    lsp_timeout_s: float = 10.0  # to start, and then to publish after each change

    def __post_init__(self) -> None:
        if self.command is not None and (not isinstance(self.command, str) or not self.command):
            raise ValueError("[diagnostics] command must be a non-empty string")
        if not isinstance(self.extensions, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v
            for k, v in self.extensions.items()
        ):
            raise ValueError('[diagnostics.extensions] maps an extension to a command: py = "..."')
        if not isinstance(self.lsp, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v.strip()
            for k, v in self.lsp.items()
        ):
            raise ValueError('[diagnostics.lsp] maps an extension to a server: py = "pylsp"')
        for name in ("extensions", "lsp"):
            table = getattr(self, name)
            object.__setattr__(self, name, {k.lower().lstrip("."): v for k, v in table.items()})
        for name in ("timeout_s", "lsp_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"[diagnostics] {name} must be a number of seconds")
            if value <= 0:
                raise ValueError(f"[diagnostics] {name} must be positive")
        if isinstance(self.max_chars, bool) or not isinstance(self.max_chars, int):
            raise ValueError("[diagnostics] max_chars must be a whole number")
        if not 0 < self.max_chars <= MAX_CHARS_LIMIT:
            raise ValueError(f"[diagnostics] max_chars must be 1 to {MAX_CHARS_LIMIT}")
        if self.command is None and not self.extensions and not self.lsp:
            raise ValueError(
                "[diagnostics] needs a command, [diagnostics.extensions] or [diagnostics.lsp]"
            )

    @classmethod
    def from_table(cls, table: dict[str, Any]) -> DiagnosticsConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(f"[diagnostics]: unknown setting(s) {', '.join(unknown)}")
        return cls(**table)

    def command_for(self, path: str) -> str | None:
        return self.extensions.get(Path(path).suffix.lower().lstrip("."), self.command)

    def server_for(self, path: str) -> str | None:
        return self.lsp.get(Path(path).suffix.lower().lstrip("."))


@dataclass(frozen=True, slots=True)
class CheckerRun:
    """One checker run: its command line, exit code and the findings kept (its text). Not a
    finding itself: agent/review.py's Finding is one; this is a run that may report many."""

    command: str
    exit_code: int | None
    text: str
    note: str = ""  # the run itself went wrong: timed out, refused by the sandbox
    server: bool = False  # a language server's (no exit code)


class Diagnostics:
    def __init__(self, config: DiagnosticsConfig) -> None:
        self.config = config
        self._lsp: LspPool | None = None  # the session's language servers, started on use
        self._lsp_lock = threading.Lock()  # subagents' calls may come at once

    def close(self) -> None:
        """Stops the language servers (the session's close calls it; the pool's finalizer,
        at Python's exit, is the fallback)."""
        if self._lsp is not None:
            self._lsp.close()

    def annotate(self, result: ToolResult, ctx: ToolContext) -> ToolResult:
        """`result` with the findings for the files it changed appended (unchanged when the
        call failed or changed no file that a checker covers)."""
        changed = result.metadata.get("paths_changed")
        if result.is_error or not isinstance(changed, list) or not changed:
            return result
        files = _existing(changed, ctx.cwd)
        groups: dict[str, list[str]] = {}
        servers: dict[str, list[str]] = {}
        for rel in files:
            for command, into in (
                (self.config.command_for(rel), groups),
                (self.config.server_for(rel), servers),
            ):
                if command is not None:
                    into.setdefault(command, []).append(rel)
        if not groups and not servers:
            return result
        found = [(self._run(command, rels, ctx), rels) for command, rels in groups.items()]
        found += [(self._ask(command, rels, ctx), rels) for command, rels in servers.items()]
        text = _bounded("\n".join(_shown(f, rels) for f, rels in found), self.config.max_chars)
        meta = [
            {"command": f.command, "exit_code": f.exit_code, "findings": bool(f.text)}
            | ({"language_server": True} if f.server else {})
            for f, _ in found
        ]
        return replace(
            result,
            output=f"{result.output}\n\n{text}",
            metadata={**result.metadata, "diagnostics": meta},
        )

    def _ask(self, command: str, rels: Sequence[str], ctx: ToolContext) -> CheckerRun:
        """What `command`'s language server publishes for these files."""
        with self._lsp_lock:
            if self._lsp is None:
                self._lsp = LspPool(
                    lambda argv, cwd, run_dir: _server_launch(ctx, argv, cwd, run_dir),
                    ctx.cwd,
                    self.config.lsp_timeout_s,
                )
            pool = self._lsp
        report = pool.check(command, rels)
        return CheckerRun(command, None, report.text, report.note, server=True)

    def _run(self, command: str, rels: Sequence[str], ctx: ToolContext) -> CheckerRun:
        from .sandbox.runner import SandboxUnavailable

        quoted = " ".join(shlex.quote(r) for r in rels)
        line = command.replace(FILES, quoted)
        try:
            r = _sandbox_for(ctx).run(
                line, cwd=ctx.cwd, timeout_s=self.config.timeout_s, cancel=ctx.cancel, env=ctx.env
            )
        except (SandboxUnavailable, WriteBudgetSpent) as e:
            return CheckerRun(line, None, "", f"not run: {e}")
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
        return CheckerRun(line, r.exit_code, output.strip(), note)


def _sandbox_for(ctx: ToolContext, long_lived: bool = False) -> Sandbox:
    """The one launch policy of a configured checker and a language server: the session's
    sandbox; a server, which lives for the session, without the per-command CPU limit."""
    if not long_lived:
        return ctx.sandbox
    from .sandbox.runner import Sandbox

    limits = replace(ctx.sandbox.policy.limits, cpu_s=_SERVER_CPU_S)
    return Sandbox(ctx.sandbox.policy.with_(limits=limits), ctx.sandbox.report)


def _server_launch(
    ctx: ToolContext, argv: list[str], cwd: Path, run_dir: Path
) -> tuple[list[str], dict[str, str]]:
    """A language server's confined command line and environment (its process is started
    and kept by tools/lsp/pool.py); PermissionError where a checker would not run either."""
    sandbox = _sandbox_for(ctx, long_lived=True)
    if not sandbox.report.protective and not sandbox.policy.dangerously_no_sandbox:
        raise PermissionError(
            "no sandbox layer is available here (pass --dangerously-no-sandbox to run it "
            "unprotected)"
        )
    if SandboxLayer.RLIMITS in sandbox.active_layers():
        try:
            ctx.sandbox.budget.check()  # the session's, as Sandbox.run checks it for a checker
        except WriteBudgetSpent as e:
            raise PermissionError(str(e)) from None
    full, env, _ = sandbox.launch_argv(argv, cwd, run_dir, env=ctx.env, nproc_watch=False)
    return full, env


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


def _shown(f: CheckerRun, rels: Sequence[str]) -> str:
    what = ", ".join(rels)
    source = f"language server `{f.command}`" if f.server else f"`{f.command}`"
    if f.note:
        return f"[diagnostics: {source} {f.note}]" + (f"\n{f.text}" if f.text else "")
    ran = source if f.server else f"{source}, exit {f.exit_code}"
    if not f.text:
        return f"[diagnostics: no findings for {what} ({ran})]"
    return f"[diagnostics for {what} ({ran}):]\n{f.text}"


def _bounded(text: str, cap: int) -> str:
    if len(text) <= cap:
        return text
    return text[:cap] + f"\n[... {len(text) - cap} more characters of diagnostics cut]"
