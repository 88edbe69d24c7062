"""`m3agent` with no sub-command: the terminal UI (the Typer callback)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.callback(invoke_without_command=True)
    def tui(
        ctx: typer.Context,
        engine: str | None = typer.Option(
            None, "--engine", help="Backend: native|vllm|remote|scripted."
        ),
        model: str | None = typer.Option(
            None, "--model", help="Model directory (native, vllm) or served model name (remote)."
        ),
        base_url: str | None = typer.Option(
            None, "--base-url", help="OpenAI-compatible server URL (remote)."
        ),
        script: Path | None = typer.Option(
            None, "--script", help="JSON array of raw model outputs (scripted engine)."
        ),
        thinking: str | None = typer.Option(
            None, "--thinking", help="Thinking mode: enabled|disabled|adaptive."
        ),
        approval: str | None = typer.Option(None, "--approval", help="untrusted|on-request|never."),
        sandbox: str | None = typer.Option(
            None, "--sandbox", help="read-only|workspace-write|full-access."
        ),
        cwd: Path | None = typer.Option(None, "--cwd", help="Workspace (default: here)."),
        resume: str | None = typer.Option(None, "--resume", help="Continue session ID."),
        allow_home: bool = typer.Option(
            False, "--allow-home", help="Start even in $HOME, / or a directory holding them."
        ),
    ) -> None:
        """Without a command: open the terminal UI in the workspace."""
        if ctx.invoked_subcommand is not None:
            return  # a sub-command runs; the TUI stays closed
        from m3agent.app.tui.launch import launch

        flags = {"engine": engine, "model": model, "base_url": base_url, "thinking": thinking,
                 "approval": approval, "sandbox": sandbox, "allow_home": allow_home or None}
        raise typer.Exit(launch(flags, script=script, cwd=cwd, resume=resume))
