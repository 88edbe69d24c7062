"""`m3agent run PROMPT`: one task, headless, from the command line."""

from __future__ import annotations

from pathlib import Path

import typer

_ENGINES = "native|vllm|remote|scripted"


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run(
        prompt: str = typer.Argument(..., help="The task. Use - to read it from stdin."),
        engine: str | None = typer.Option(None, "--engine", help=f"Backend: {_ENGINES}."),
        model: str | None = typer.Option(
            None, "--model", help="Model directory (native, vllm) or served model name (remote)."
        ),
        base_url: str | None = typer.Option(
            None,
            "--base-url",
            help="OpenAI-compatible server URL (remote), e.g. http://host:8000/v1.",
        ),
        script: Path | None = typer.Option(
            None, "--script", help="JSON array of raw model outputs (scripted engine)."
        ),
        thinking: str | None = typer.Option(
            None, "--thinking", help="Thinking mode: enabled|disabled|adaptive."
        ),
        output_format: str = typer.Option("text", "--output-format", help="text|json|stream-json."),
        max_turns: int | None = typer.Option(
            None, "--max-turns", help="Most model calls for this prompt (exit 4 when reached)."
        ),
        cwd: Path | None = typer.Option(None, "--cwd", help="Workspace (default: here)."),
        resume: str | None = typer.Option(None, "--resume", help="Continue session ID."),
        approval: str | None = typer.Option(None, "--approval", help="untrusted|on-request|never."),
        sandbox: str | None = typer.Option(
            None, "--sandbox", help="read-only|workspace-write|full-access."
        ),
        network: bool = typer.Option(
            False, "--network", help="Let shell commands use the network (off by default)."
        ),
        add_dir: list[Path] = typer.Option(
            [], "--add-dir", help="Another writable directory besides the workspace (repeatable)."
        ),
        dangerously_no_sandbox: bool = typer.Option(
            False,
            "--dangerously-no-sandbox",
            help="Run shell commands even where no sandbox layer works (unprotected!).",
        ),
        max_tokens: int | None = typer.Option(
            None, "--max-tokens", help="Most tokens the model may generate per call."
        ),
        context_budget: int | None = typer.Option(
            None, "--context-budget", help="Token budget of the repository snapshot."
        ),
        no_context: bool = typer.Option(
            False, "--no-context", help="Do not put a repository snapshot in the prompt."
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
        image: list[Path] = typer.Option([], "--image", help="Attach an image (repeatable)."),
        video: list[Path] = typer.Option([], "--video", help="Attach a video (repeatable)."),
    ) -> None:
        """Run one task headless and print the answer."""
        code = execute(
            prompt=prompt,
            flags={
                "engine": engine,
                "model": model,
                "base_url": base_url,
                "thinking": thinking,
                "max_turns": max_turns,
                "approval": approval,
                "sandbox": sandbox,
                "network": network or None,
                "add_dirs": tuple(str(d) for d in add_dir) or None,
                "dangerously_no_sandbox": dangerously_no_sandbox or None,
                "max_tokens": max_tokens,
                "context_budget": context_budget,
                "context": False if no_context else None,
                "mcp_config_files": tuple(str(p) for p in mcp_config) or None,
                "strict_mcp_config": strict_mcp_config or None,
                "trust_project_mcp": trust_project_mcp or None,
            },
            script=script,
            output_format=output_format,
            cwd=cwd,
            resume=resume,
            images=image,
            videos=video,
        )
        raise typer.Exit(code)


def execute(
    *,
    prompt: str,
    flags: dict,
    script: Path | None,
    output_format: str,
    cwd: Path | None,
    resume: str | None,
    images: list[Path],
    videos: list[Path],
) -> int:
    """Everything behind the flags; returns the exit code. Heavy imports happen here."""
    import asyncio
    import signal
    import sys

    from m3agent.agent.attachments import AttachmentError, validate_attachments
    from m3agent.agent.conversation import SessionLogError
    from m3agent.agent.ops import Interrupt, UserTurn
    from m3agent.app import exit_codes
    from m3agent.app.factory import build_session
    from m3agent.app.headless import deny_approver, make_renderer, run_headless, tty_approver
    from m3agent.app.settings import load_settings
    from m3agent.engine.api import EngineError, EngineUnavailable, MediaPart

    def fail(code: int, message: str) -> int:
        sys.stderr.write(f"error: {message}\n")
        return code

    if prompt == "-":
        prompt = sys.stdin.read()
    if not prompt.strip():
        return fail(exit_codes.USAGE_ERROR, "the prompt is empty")
    parts = [MediaPart("image", str(p)) for p in images]
    parts += [MediaPart("video", str(p)) for p in videos]
    try:
        media = validate_attachments(parts) if parts else ()
    except AttachmentError as e:
        return fail(exit_codes.USAGE_ERROR, str(e))
    try:
        settings = load_settings().override(**flags)
        renderer = make_renderer(output_format)
        turn = UserTurn(prompt, media=tuple(media), thinking_mode=flags.get("thinking"))
    except ValueError as e:
        return fail(exit_codes.USAGE_ERROR, str(e))
    try:
        session = build_session(settings, cwd=cwd, script=script, resume=resume)
    except (ValueError, SessionLogError) as e:
        return fail(exit_codes.USAGE_ERROR, str(e))
    except EngineUnavailable as e:
        return fail(exit_codes.ENGINE_UNAVAILABLE, str(e))
    except EngineError as e:
        return fail(exit_codes.INTERNAL_ERROR, str(e))

    if settings.approval == "never":
        approver = deny_approver("approvals are off")  # never called: the gate never asks
    elif sys.stdin.isatty() and sys.stderr.isatty():
        approver = tty_approver(sys.stderr)
    else:
        approver = deny_approver(
            "nobody can approve in headless mode (no terminal); the user may rerun with "
            "--approval never or allow the tool in config"
        )

    async def main() -> int:
        loop = asyncio.get_running_loop()

        def on_sigint() -> None:
            # The first Ctrl-C stops the turn cleanly; a second one is the default (abort).
            session.submit(Interrupt())
            loop.remove_signal_handler(signal.SIGINT)

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (NotImplementedError, RuntimeError):  # not the main thread / platform
            pass
        try:
            return await run_headless(session, turn, renderer, approver)
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            await session.engine.close()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return exit_codes.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`| head`); the session log still has everything.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return exit_codes.INTERNAL_ERROR
