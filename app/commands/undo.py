"""`m3agent undo`: put the workspace back as it was before the last turn's first change."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer
from m3agent.tools.checkpoint import CheckpointError, Checkpoints, state_dir_for

from .. import exit_codes
from ..cli_errors import die
from ..settings import load_settings


def register(app: typer.Typer) -> None:
    @app.command("undo")
    def undo(
        cwd: Path = typer.Option(Path("."), "--cwd", help="The workspace to restore."),
        list_only: bool = typer.Option(False, "--list", help="List checkpoints, newest first."),
        checkpoint: str | None = typer.Option(
            None, "--to", help="Restore this checkpoint id (default: the newest)."
        ),
    ) -> None:
        """Restore the newest checkpoint (files changed by tools and shell commands)."""
        try:
            settings = load_settings()
        except ValueError as e:
            die(str(e))
        workspace = cwd.resolve()
        if not workspace.is_dir():
            die(f"{cwd} is not a directory")
        cps = Checkpoints(workspace, state_dir_for(workspace, settings.checkpoints_dir))
        try:
            found = cps.list()
            if list_only:
                for c in found:
                    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c.created))
                    sys.stdout.write(f"{c.id[:12]}  {when}  {c.label}\n")
                if not found:
                    sys.stderr.write(f"no checkpoints for {workspace}\n")
                return
            if not found:
                die(f"no checkpoints for {workspace}; nothing to undo")
            target = checkpoint or found[0].id
            removed = cps.restore(target)
        except CheckpointError as e:
            die(str(e), exit_codes.INTERNAL_ERROR)
        label = next((c.label for c in found if c.id.startswith(target)), "")
        sys.stdout.write(f"restored {workspace} to checkpoint {target[:12]} ({label})\n")
        if removed:
            sys.stdout.write(f"removed {len(removed)} file(s) created since\n")
