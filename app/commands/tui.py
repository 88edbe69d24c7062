"""`m3agent` with no sub-command: the terminal UI (the Typer callback)."""

from __future__ import annotations

from pathlib import Path

import typer


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"m3agent {version('m3agent')}")
        except PackageNotFoundError:  # run from a source tree that was never installed
            typer.echo("m3agent (not installed)")
        raise typer.Exit(0)


def register(app: typer.Typer) -> None:
    @app.callback(invoke_without_command=True)
    def tui(
        ctx: typer.Context,
        engine: str | None = typer.Option(
            None,
            "--engine",
            "-e",
            metavar="NAME",
            help="Backend: native, vllm, remote or scripted (default: from the config).",
        ),
        model: str | None = typer.Option(
            None,
            "--model",
            "-m",
            metavar="MODEL",
            help="Model directory (native, vllm) or served model name (remote).",
        ),
        base_url: str | None = typer.Option(
            None, "--base-url", metavar="URL", help="OpenAI-compatible server URL (remote)."
        ),
        script: Path | None = typer.Option(
            None,
            "--script",
            metavar="FILE",
            help="JSON array of raw model outputs (scripted engine).",
        ),
        thinking: str | None = typer.Option(
            None,
            "--thinking",
            "-t",
            metavar="MODE",
            help="Thinking mode: enabled, disabled or adaptive.",
        ),
        approval: str | None = typer.Option(
            None,
            "--approval",
            "-a",
            metavar="POLICY",
            help="When to ask: untrusted, on-request or never.",
        ),
        sandbox: str | None = typer.Option(
            None,
            "--sandbox",
            "-s",
            metavar="MODE",
            help="read-only, workspace-write or full-access.",
        ),
        cwd: Path | None = typer.Option(
            None, "--cwd", "-C", metavar="DIR", help="Workspace (default: here)."
        ),
        continue_last: bool = typer.Option(
            False, "--continue", "-c", help="Continue the last session of this workspace."
        ),
        resume: str | None = typer.Option(
            None, "--resume", "-r", metavar="ID", help="Continue session ID."
        ),
        version: bool = typer.Option(
            False,
            "--version",
            "-V",
            is_eager=True,
            callback=_version,
            help="Print the version and exit.",
        ),
        allow_home: bool = typer.Option(
            False, "--allow-home", help="Start even in $HOME, / or a directory holding them."
        ),
        max_tokens: int | None = typer.Option(
            None, "--max-tokens", metavar="N", help="Most tokens the model may generate per call."
        ),
    ) -> None:
        """Without a command: open the terminal UI in the workspace."""
        if ctx.invoked_subcommand is not None:
            return  # a sub-command runs; the TUI stays closed
        from ..settings import Overrides
        from ..tui.launch import launch

        overrides = Overrides(
            engine=engine,
            model=model,
            base_url=base_url,
            thinking=thinking,
            approval=approval,
            sandbox=sandbox,
            allow_home=allow_home,
            max_tokens=max_tokens,
        )
        raise typer.Exit(
            launch(overrides, script=script, cwd=cwd, resume=resume, continue_last=continue_last)
        )
