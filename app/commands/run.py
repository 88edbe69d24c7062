"""`m3agent run PROMPT`: one task, headless, from the command line: the flags (what runs
behind them: app/headless_run.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from . import flags


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        ctx: typer.Context,
        prompt: str | None = typer.Argument(
            None,
            metavar="[PROMPT]",
            help="The task; - or none reads it from stdin. Piped stdin beside a PROMPT is "
            "added after it.",
        ),
        engine: flags.Engine = None,
        model: flags.Model = None,
        base_url: flags.BaseUrl = None,
        script: flags.Script = None,
        thinking: flags.Thinking = None,
        output_format: str = typer.Option(
            "text",
            "--output-format",
            metavar="FORMAT",
            help="text, json or stream-json.",
        ),
        output_last_message: Path | None = typer.Option(
            None,
            "--output-last-message",
            "-o",
            metavar="FILE",
            help="Also write the final answer to FILE.",
        ),
        max_turns: int | None = typer.Option(
            None,
            "--max-turns",
            metavar="N",
            help="Most model calls for this prompt (exit 4 when reached).",
        ),
        cwd: flags.Cwd = None,
        worktree: flags.Worktree = None,
        continue_last: flags.ContinueLast = False,
        resume: flags.Resume = None,
        approval: flags.Approval = None,
        sandbox: flags.Sandbox = None,
        network: bool = typer.Option(
            False, "--network", help="Let shell commands use the network (off by default)."
        ),
        add_dir: list[Path] = typer.Option(
            [],
            "--add-dir",
            metavar="DIR",
            help="Another writable directory besides the workspace (repeatable).",
        ),
        dangerously_no_sandbox: bool = typer.Option(
            False,
            "--dangerously-no-sandbox",
            help="Run shell commands even where no sandbox layer works (unprotected!).",
        ),
        allow_home: flags.AllowHome = False,
        accept_sandbox_gaps: bool = typer.Option(
            False,
            "--accept-sandbox-gaps",
            help="Without bubblewrap, accept that commands can chmod/touch files outside the "
            "workspace (asked once in a terminal otherwise).",
        ),
        max_tokens: flags.MaxTokens = None,
        context_budget: int | None = typer.Option(
            None, "--context-budget", metavar="N", help="Token budget of the repository snapshot."
        ),
        no_context: flags.NoContext = False,
        in_process: bool = typer.Option(
            False,
            "--in-process",
            help="native/vllm: load the model in this process instead of starting (or using) "
            "a background `m3agent serve` (config: warm = false).",
        ),
        mcp_config: list[Path] = typer.Option(
            [], "--mcp-config", help="MCP servers from this .mcp.json-style file (repeatable)."
        ),
        strict_mcp_config: bool = typer.Option(
            False, "--strict-mcp-config", help="Use only the --mcp-config servers."
        ),
        trust_project_mcp: bool = typer.Option(
            False, "--trust-project-mcp", help="Start ./.mcp.json servers even if not trusted."
        ),
        append_system_prompt: str | None = typer.Option(
            None,
            "--append-system-prompt",
            metavar="TEXT",
            help="Add TEXT to the end of the system prompt (a new session's).",
        ),
        output_schema: Path | None = typer.Option(
            None,
            "--output-schema",
            "--json-schema",
            metavar="FILE",
            help="JSON Schema the final answer must satisfy (else exit 1).",
        ),
        input_format: str = typer.Option(
            "text",
            "--input-format",
            metavar="FORMAT",
            help="text, or stream-json: user messages on stdin, one JSON object a line.",
        ),
        permission_mode: str | None = typer.Option(
            None,
            "--permission-mode",
            metavar="MODE",
            help="default, acceptEdits (file edits without asking), plan (read-only tools; "
            "the model answers with a plan) or bypassPermissions (= --approval never).",
        ),
        allowed_tools: list[str] = typer.Option(
            [],
            "--allowed-tools",
            "--allowedTools",
            metavar="TOOLS",
            help="Tools (names or globs, comma-separated) allowed without asking.",
        ),
        disallowed_tools: list[str] = typer.Option(
            [],
            "--disallowed-tools",
            "--disallowedTools",
            metavar="TOOLS",
            help="Tools (names or globs, comma-separated) never run.",
        ),
        ephemeral: bool = typer.Option(
            False, "--ephemeral", help="Do not keep the session log after the run."
        ),
        image: list[Path] = typer.Option(
            [], "--image", "-i", metavar="FILE", help="Attach an image (repeatable)."
        ),
        video: list[Path] = typer.Option(
            [], "--video", metavar="FILE", help="Attach a video (repeatable)."
        ),
        offload_experts: flags.OffloadExperts = None,
        expert_form: flags.ExpertForm = None,
    ) -> None:
        """Run one task headless and print the answer."""
        from ..headless_run import RunOptions, execute
        from ..settings import Overrides

        code = execute(
            prompt=prompt,
            overrides=flags.fill(Overrides, ctx.params),
            options=flags.fill(RunOptions, ctx.params),
            script=script,
            cwd=cwd,
            resume=resume,
            images=image,
            videos=video,
            continue_last=continue_last,
        )
        raise typer.Exit(code)
