"""`m3agent` with no sub-command: the terminal UI (the Typer callback)."""

from __future__ import annotations

import typer

from . import flags


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
        engine: flags.Engine = None,
        model: flags.Model = None,
        base_url: flags.BaseUrl = None,
        script: flags.Script = None,
        thinking: flags.Thinking = None,
        approval: flags.Approval = None,
        sandbox: flags.Sandbox = None,
        cwd: flags.Cwd = None,
        worktree: flags.Worktree = None,
        continue_last: flags.ContinueLast = False,
        resume: flags.Resume = None,
        version: bool = typer.Option(
            False,
            "--version",
            "-V",
            is_eager=True,
            callback=_version,
            help="Print the version and exit.",
        ),
        allow_home: flags.AllowHome = False,
        max_tokens: flags.MaxTokens = None,
        offload_experts: flags.OffloadExperts = None,
        expert_form: flags.ExpertForm = None,
        inline: bool = typer.Option(
            False,
            "--inline",
            help="Draw the UI below the shell prompt instead of taking the whole screen: the "
            "terminal keeps its scrollback and selection, and the last frame stays on exit.",
        ),
    ) -> None:
        """Without a command: open the terminal UI in the workspace."""
        if ctx.invoked_subcommand is not None:
            return  # a sub-command runs; the TUI stays closed
        from ..settings import Overrides
        from ..tui.launch import launch

        overrides = flags.fill(Overrides, ctx.params)
        raise typer.Exit(
            launch(
                overrides,
                script=script,
                cwd=cwd,
                resume=resume,
                continue_last=continue_last,
                worktree=worktree,
                inline=inline,
            )
        )
