"""`m3agent resume ID` / `m3agent resume --last`: open the terminal UI on a saved session."""

from __future__ import annotations

from pathlib import Path

import typer

from ..cli_errors import die
from ..settings import Overrides


def register(app: typer.Typer) -> None:
    @app.command("resume")
    def resume(
        session_id: str | None = typer.Argument(
            None, metavar="ID", help="The session (m3agent sessions lists them)."
        ),
        last: bool = typer.Option(
            False, "--last", "-l", help="The last session of this workspace."
        ),
        cwd: Path | None = typer.Option(
            None, "--cwd", "-C", metavar="DIR", help="Workspace (default: the session's)."
        ),
    ) -> None:
        """Open the terminal UI on a saved session (engine and model from the config)."""
        if (session_id is None) == (not last):
            die("give a session ID or --last (m3agent sessions lists them)")
        from ..tui.launch import launch

        raise typer.Exit(
            launch(Overrides(), script=None, cwd=cwd, resume=session_id, continue_last=last)
        )
