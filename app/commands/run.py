"""`m3agent run PROMPT`: one task, headless, from the command line: the flags (what runs
behind them: app/headless_run.py).

The flags only run has are declared below as flags.py declares the shared ones, one Annotated
type each, so run()'s signature reads as the command line, one flag a line. The repeatable
flags keep their default inside typer.Option: a `= []` default in the signature would be one
list shared by every call."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..settings import Overrides
from . import flags

Prompt = Annotated[
    str | None,
    typer.Argument(
        metavar="[PROMPT]",
        help="The task; - or none reads it from stdin. Piped stdin beside a PROMPT is "
        "added after it.",
    ),
]
OutputFormat = Annotated[
    str,
    typer.Option("--output-format", metavar="FORMAT", help="text, json or stream-json."),
]
OutputLastMessage = Annotated[
    Path | None,
    typer.Option(
        "--output-last-message",
        "-o",
        metavar="FILE",
        help="Also write the final answer to FILE.",
    ),
]
MaxTurns = Annotated[
    int | None,
    typer.Option(
        "--max-turns",
        metavar="N",
        help="Most model calls for this prompt (exit 4 when reached).",
    ),
]
Network = Annotated[
    bool,
    typer.Option("--network", help="Let shell commands use the network (off by default)."),
]
DangerouslyNoSandbox = Annotated[
    bool,
    typer.Option(
        "--dangerously-no-sandbox",
        help="Run shell commands even where no sandbox layer works (unprotected!).",
    ),
]
AcceptSandboxGaps = Annotated[
    bool,
    typer.Option(
        "--accept-sandbox-gaps",
        help="Without bubblewrap, accept that commands can chmod/touch files outside the "
        "workspace (asked once in a terminal otherwise).",
    ),
]
ContextBudget = Annotated[
    int | None,
    typer.Option("--context-budget", metavar="N", help="Token budget of the repository snapshot."),
]
InProcess = Annotated[
    bool,
    typer.Option(
        "--in-process",
        help="native/vllm: load the model in this process instead of starting (or using) "
        "a background `m3agent serve` (config: warm = false).",
    ),
]
StrictMcpConfig = Annotated[
    bool, typer.Option("--strict-mcp-config", help="Use only the --mcp-config servers.")
]
TrustProjectMcp = Annotated[
    bool,
    typer.Option("--trust-project-mcp", help="Start ./.mcp.json servers even if not trusted."),
]
AppendSystemPrompt = Annotated[
    str | None,
    typer.Option(
        "--append-system-prompt",
        metavar="TEXT",
        help="Add TEXT to the end of the system prompt (a new session's).",
    ),
]
OutputSchema = Annotated[
    Path | None,
    typer.Option(
        "--output-schema",
        "--json-schema",
        metavar="FILE",
        help="JSON Schema the final answer must satisfy (else exit 1).",
    ),
]
InputFormat = Annotated[
    str,
    typer.Option(
        "--input-format",
        metavar="FORMAT",
        help="text, or stream-json: user messages on stdin, one JSON object a line.",
    ),
]
PermissionMode = Annotated[
    str | None,
    typer.Option(
        "--permission-mode",
        metavar="MODE",
        help="default, acceptEdits (file edits without asking), plan (read-only tools; "
        "the model answers with a plan) or bypassPermissions (= --approval never).",
    ),
]
Ephemeral = Annotated[
    bool, typer.Option("--ephemeral", help="Do not keep the session log after the run.")
]


def register(app: typer.Typer) -> None:
    app.command("run")(run)


def run(
    ctx: typer.Context,
    prompt: Prompt = None,
    engine: flags.Engine = None,
    model: flags.Model = None,
    base_url: flags.BaseUrl = None,
    script: flags.Script = None,
    thinking: flags.Thinking = None,
    output_format: OutputFormat = "text",
    output_last_message: OutputLastMessage = None,
    max_turns: MaxTurns = None,
    cwd: flags.Cwd = None,
    worktree: flags.Worktree = None,
    continue_last: flags.ContinueLast = False,
    resume: flags.Resume = None,
    approval: flags.Approval = None,
    sandbox: flags.Sandbox = None,
    network: Network = False,
    add_dir: list[Path] = typer.Option(
        [],
        "--add-dir",
        metavar="DIR",
        help="Another writable directory besides the workspace (repeatable).",
    ),
    dangerously_no_sandbox: DangerouslyNoSandbox = False,
    allow_home: flags.AllowHome = False,
    accept_sandbox_gaps: AcceptSandboxGaps = False,
    max_tokens: flags.MaxTokens = None,
    context_budget: ContextBudget = None,
    no_context: flags.NoContext = False,
    in_process: InProcess = False,
    mcp_config: list[Path] = typer.Option(
        [], "--mcp-config", help="MCP servers from this .mcp.json-style file (repeatable)."
    ),
    strict_mcp_config: StrictMcpConfig = False,
    trust_project_mcp: TrustProjectMcp = False,
    append_system_prompt: AppendSystemPrompt = None,
    output_schema: OutputSchema = None,
    input_format: InputFormat = "text",
    permission_mode: PermissionMode = None,
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
    ephemeral: Ephemeral = False,
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

    # Every flag reaches execute() through ctx.params: the settings' (Overrides) and run's
    # own (RunOptions), each picked by its field names.
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
