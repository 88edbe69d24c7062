"""`m3agent hooks list|trust`: the hooks sessions run, and trust for a project's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from m3agent.agent.hooks.pins import UNPINNABLE, pin

from ..cli_errors import die
from ..hooks_settings import load_hooks, trust_hooks
from ..safe_text import write_trust_lines
from ..settings import load_settings
from ..status_line import TRUST_TABLE, project_status_line

if TYPE_CHECKING:
    from ..hooks_settings import HookSources
    from ..settings import Settings


def register(app: typer.Typer) -> None:
    hooks = typer.Typer(help="Hooks: programs run on session events (docs/hooks.md).")
    app.add_typer(hooks, name="hooks")

    def _load(cwd: Path) -> tuple[Settings, Path, HookSources]:
        try:
            settings = load_settings()
            where = cwd.expanduser().resolve()
            return (
                settings,
                where,
                load_hooks(settings.user_dir or settings.home, settings.home, where),
            )
        except ValueError as e:
            die(str(e))

    @hooks.command("list")
    def list_(
        cwd: Path = typer.Option(Path("."), "--cwd", help="Project whose hooks to show."),
    ) -> None:
        """Every hook with its event, matcher, command line, where it runs (the sandbox or the
        host) and whether it runs."""
        _settings, _where, src = _load(cwd)
        rows = [("user", True, r) for r in src.user.all_commands()]
        rows += [("project", src.project_trusted, r) for r in src.project.all_commands()]
        if not rows:
            sys.stdout.write("no hooks configured\n")
        lines = []
        for scope, runs, (event, matcher, h) in rows:
            mark = "" if runs else "  (not trusted: `m3agent hooks trust`)"
            place = "sandbox" if h.sandboxed else "host"
            lines.append(f"{scope:8} {place:8} {event:17} {matcher or '*':12} {h.command}{mark}")
        write_trust_lines(sys.stdout, lines)  # the repository's bytes never drive the terminal

    @hooks.command("trust")
    def trust_(
        cwd: Path = typer.Option(Path("."), "--cwd", help="Project whose hooks to trust."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Trust without asking."),
    ) -> None:
        """Shows the project's hook command lines and, on yes, lets them run."""
        settings, where, src = _load(cwd)
        status_line = project_status_line(where)  # its command runs as the hooks do
        if not src.project and status_line is None:
            die(f"{where / '.m3agent' / 'settings.json'} has no hooks and no status line")
        sys.stdout.write(
            "These commands will run in the tool sandbox, in this workspace, on session events "
            "(their answers can block tool calls):\n"
        )
        lines = [
            f"  {event} [{matcher or '*'}]: {h.command}"
            for event, matcher, h in src.project.all_commands()
        ]
        commands = [h.command for _e, _m, h in src.project.all_commands()]
        if isinstance(status_line, dict):
            lines.append(f"  statusLine: {status_line.get('command')}")
            commands.append(str(status_line.get("command")))

        named = dict(p for c in commands for p in pin(c, where))
        if named:
            lines.append(
                "and these workspace files as they are now (a change stops the command that "
                "names it until you trust again):"
            )
            for rel, sha in named.items():
                shown = "(absent)" if sha is None else sha[:12]
                if sha == UNPINNABLE:
                    shown = "cannot be pinned: this command will not run"
                lines.append(f"  {rel}: {shown}")
        write_trust_lines(sys.stdout, lines)
        if not yes:
            if not sys.stdin.isatty():
                die("not a terminal: pass --yes to trust these hooks")
            if input("Trust them? [y/N] ").strip().lower() not in ("y", "yes"):
                die("not trusted")
        if src.project:
            trust_hooks(settings.home, where, src.project_raw)
        if status_line is not None:
            trust_hooks(settings.home, where, status_line, TRUST_TABLE)
        sys.stdout.write("trusted\n")
