"""`m3agent permissions trust`: let a project's saved permissions count (docs/cli.md).

A cloned repository's `.m3agent/permissions.json` (shell prefixes) and the "permissions"
table of its `.m3agent/settings.json` count only once this user trusts those files' exact
content (app/prefix_rules.py); the TUI's `/permissions trust` does the same."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from ..cli_errors import die
from ..prefix_rules import project_entries, trust_project
from ..settings import load_settings


def register(app: typer.Typer) -> None:
    permissions = typer.Typer(help="A project's saved permission rules (docs/cli.md).")
    app.add_typer(permissions, name="permissions")

    @permissions.command("trust")
    def trust_(
        cwd: Path = typer.Option(Path("."), "--cwd", help="Project whose rules to trust."),
        yes: bool = typer.Option(False, "--yes", "-y", help="Trust without asking."),
    ) -> None:
        """Shows what the project's permission files allow and, on yes, lets it count."""
        try:
            settings = load_settings()
        except ValueError as e:
            die(str(e))
        where = cwd.expanduser().resolve()
        entries = project_entries(where)
        sys.stdout.write(
            f"{where}'s permission files say:\n"
            + "".join(f"  {line}\n" for line in entries or ["(no rules)"])
        )
        if not yes:
            if not sys.stdin.isatty():
                die("not a terminal: pass --yes to trust them")
            if input("Trust them? [y/N] ").strip().lower() not in ("y", "yes"):
                die("not trusted")
        try:
            said = trust_project(settings.home, where)
        except (OSError, ValueError) as e:
            die(str(e))
        sys.stdout.write(f"{said}\n")
