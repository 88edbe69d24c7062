"""`m3agent review`: the model reviews a diff and lists its findings, each with a file and a
line (Codex's `codex review --uncommitted | --base BRANCH | --commit SHA`). The diff, the
prompt and the findings' format are agent/review.py's; the run is `m3agent run`'s, read-only."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import typer
from m3agent.agent.review import FINDINGS_SCHEMA, ReviewError, ReviewTarget, collect_diff

from .. import exit_codes
from ..headless_result import early_error_line
from ..safe_text import visible
from ..settings import Overrides
from . import flags


def register(app: typer.Typer) -> None:
    @app.command("review")
    def review(
        ctx: typer.Context,
        instructions: str | None = typer.Argument(
            None, metavar="[INSTRUCTIONS]", help="What else to look at (added to the prompt)."
        ),
        uncommitted: bool = typer.Option(
            False,
            "--uncommitted",
            help="Review the staged, unstaged and untracked changes against HEAD (default).",
        ),
        base: str | None = typer.Option(
            None,
            "--base",
            metavar="BRANCH",
            help="Review this branch's changes against BRANCH (the work tree against their "
            "merge base).",
        ),
        commit: str | None = typer.Option(
            None, "--commit", metavar="SHA", help="Review the changes of one commit."
        ),
        output_format: str = typer.Option(
            "text",
            "--output-format",
            metavar="FORMAT",
            help="text (path:line: [priority] title, one a finding) or json.",
        ),
        engine: flags.Engine = None,
        model: flags.Model = None,
        base_url: flags.BaseUrl = None,
        script: flags.Script = None,
        thinking: flags.Thinking = None,
        cwd: flags.Cwd = None,
        max_tokens: flags.MaxTokens = None,
        max_turns: int | None = typer.Option(
            None, "--max-turns", metavar="N", help="Most model calls (exit 4 when reached)."
        ),
        approval: flags.Approval = None,
        allow_home: flags.AllowHome = False,
        accept_sandbox_gaps: bool = typer.Option(
            False,
            "--accept-sandbox-gaps",
            help="Without bubblewrap, run the read-only shell anyway (see `m3agent run`).",
        ),
        no_context: flags.NoContext = False,
        in_process: bool = typer.Option(
            False, "--in-process", help="native/vllm: load the model in this process."
        ),
    ) -> None:
        """Review code changes: findings with file and line (exit 2: nothing to review). Run
        anywhere in the repository: the review works at its root."""
        raise typer.Exit(
            execute_review(
                ctx.params, instructions or "", uncommitted=uncommitted, base=base, commit=commit
            )
        )


def execute_review(
    params: dict[str, object],
    instructions: str,
    *,
    uncommitted: bool,
    base: str | None,
    commit: str | None,
) -> int:
    from ..headless_run import RunOptions, execute
    from ..review_output import review_renderer

    output_format = str(params.get("output_format") or "text")

    def fail(message: str) -> int:
        sys.stderr.write(f"error: {visible(message)}\n")
        if output_format == "json":
            sys.stdout.write(early_error_line(exit_codes.USAGE_ERROR, message))
        return exit_codes.USAGE_ERROR

    if output_format not in ("text", "json"):
        return fail(f"unknown output format {output_format!r} (review prints text or json)")
    cwd = params.get("cwd")
    where = (Path(str(cwd)) if cwd else Path.cwd()).expanduser().resolve()
    if not where.is_dir():
        return fail(f"--cwd {where}: no such directory")
    try:
        if uncommitted and (base is not None or commit is not None):
            raise ReviewError("--uncommitted reviews the work tree: no --base or --commit with it")
        diff = collect_diff(where, ReviewTarget(base=base, commit=commit))
    except ReviewError as e:
        return fail(str(e))
    sys.stderr.write(visible(diff.headline()) + "\n")
    where = diff.root  # the model reads the files by the diff's paths
    overrides = replace(flags.fill(Overrides, params), sandbox="read-only")
    # every tool that changes files (Claude Code's `Edit`, by capability) and every MCP server
    options = RunOptions(output_format=output_format, disallowed_tools=("Edit", "mcp__*"))
    script = params.get("script")
    return execute(
        prompt=diff.prompt(instructions),
        overrides=overrides,
        options=options,
        script=Path(str(script)) if script else None,
        cwd=where,
        resume=None,
        images=[],
        videos=[],
        schema=FINDINGS_SCHEMA,
        renderer=review_renderer(output_format, sys.stdout, sys.stderr),
    )
