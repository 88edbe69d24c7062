"""What runs behind `m3agent run`'s flags (and `m3agent review`'s): the checks that need no
server first (exit 2), then what this install lacks, then the server; the session built; the
turn run headless. Every failure is one line with a documented exit code (app/exit_codes.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI starts without loading settings; execute() imports it
    from .headless import Renderer
    from .settings import Overrides


@dataclass(frozen=True, slots=True)
class RunOptions:
    """run's own flags beyond the settings (Overrides), named as the flags are."""

    output_format: str = "text"
    input_format: str = "text"
    output_last_message: Path | None = None
    append_system_prompt: str | None = None
    output_schema: Path | None = None
    ephemeral: bool = False
    permission_mode: str | None = None
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    worktree: str | None = None


def execute(
    *,
    prompt: str | None,
    overrides: Overrides,
    options: RunOptions,
    script: Path | None,
    cwd: Path | None,
    resume: str | None,
    images: list[Path],
    videos: list[Path],
    continue_last: bool = False,
    schema: dict[str, Any] | None = None,
    renderer: Renderer | None = None,
) -> int:
    """Everything behind the flags; returns the exit code. Heavy imports happen here.
    A caller with its own answer format (`m3agent review`) hands in the SCHEMA the answer
    must satisfy and the RENDERER that shows it."""
    import asyncio
    import os
    import signal
    import sys

    from m3agent.agent.attachments import AttachmentError, validate_attachments
    from m3agent.agent.conversation import SessionLogError
    from m3agent.agent.ops import Interrupt, UserTurn
    from m3agent.engine.api import EngineError, EngineName, EngineUnavailable, MediaPart

    from . import exit_codes
    from .engine_build import missing_backend
    from .factory import build_session, session_workspace
    from .headless import make_renderer, run_headless
    from .headless_approvals import headless_approver
    from .headless_result import early_error_line
    from .permission_modes import check_mode, plan_text, tool_flag_rules
    from .run_input import (
        INPUT_FORMATS,
        append_system_prompt,
        forget_session,
        load_schema,
        read_prompts,
        schema_instruction,
        unreachable,
    )
    from .safe_text import visible
    from .settings import load_settings

    output_format = options.output_format
    last_message_file = options.output_last_message

    def fail(code: int, message: str) -> int:
        sys.stderr.write(f"error: {visible(message)}\n")  # it may quote a file name
        if output_format in ("json", "stream-json"):  # a script reading stdout sees it too
            sys.stdout.write(early_error_line(code, message))
            sys.stdout.flush()
        return code

    input_format = options.input_format or "text"
    if input_format not in INPUT_FORMATS:
        return fail(
            exit_codes.USAGE_ERROR,
            f"unknown input format {input_format!r} (use one of {', '.join(INPUT_FORMATS)})",
        )
    try:
        prompt, more_prompts = read_prompts(prompt, input_format)
    except ValueError as e:
        return fail(exit_codes.USAGE_ERROR, str(e))
    if not prompt.strip():
        return fail(exit_codes.USAGE_ERROR, "the prompt is empty")
    if options.output_schema is not None:
        try:
            schema = load_schema(options.output_schema)
        except ValueError as e:
            return fail(exit_codes.USAGE_ERROR, str(e))
    if options.worktree is not None:  # the session's workspace is that worktree
        from .worktree import WorktreeError, enter_worktree

        try:
            tree = enter_worktree(cwd or Path.cwd(), options.worktree)
        except WorktreeError as e:
            return fail(exit_codes.USAGE_ERROR, str(e))
        sys.stderr.write(f"{visible(tree.describe())}\n")
        cwd = tree.path
    parts = [MediaPart("image", str(p)) for p in images]
    parts += [MediaPart("video", str(p)) for p in videos]
    try:
        media = validate_attachments(parts) if parts else ()
    except AttachmentError as e:
        return fail(exit_codes.USAGE_ERROR, str(e))
    try:
        settings = overrides.apply(load_settings())
        settings = append_system_prompt(settings, options.append_system_prompt)
        mode = check_mode(options.permission_mode or "default")
        if mode == "bypassPermissions":
            settings = settings.override(approval="never")
        flag_rules = tool_flag_rules(list(options.allowed_tools), list(options.disallowed_tools))
        # Saved path rules: the user's, and a trusted project's .m3agent/settings.json.
        from .prefix_rules import saved_rules

        where = (cwd or Path.cwd()).expanduser().resolve()
        saved, rule_notes = saved_rules(settings.home, where)
        for note in rule_notes:
            sys.stderr.write(f"note: {note}\n")
        settings = settings.override(rules=(*settings.rules, *saved, *flag_rules))
        renderer = renderer or make_renderer(output_format)
        # The schema goes with the last prompt: the cached system prompt stays as it is.
        texts = [plan_text(t, mode) for t in (prompt, *more_prompts)]
        if schema is not None:
            texts[-1] += schema_instruction(schema)
        # --thinking is this run's mode (settings.thinking, checked above, is the default).
        thinking = settings.thinking if overrides.thinking is not None else None
        turn = UserTurn(texts[0], media=tuple(media), thinking_mode=thinking)
        more = tuple(UserTurn(t, thinking_mode=thinking) for t in texts[1:])
    except ValueError as e:
        return fail(exit_codes.USAGE_ERROR, str(e))
    from .media_support import reads_media, text_only_error

    if media and reads_media(settings) is False:  # refused now, not as an HTTP 400 later
        return fail(exit_codes.USAGE_ERROR, text_only_error(settings, "--image/--video"))
    if last_message_file is not None and not last_message_file.parent.is_dir():
        return fail(exit_codes.USAGE_ERROR, f"-o {last_message_file}: no such directory")
    if options.ephemeral and (continue_last or resume):
        # Removing the log at the end would delete the session being continued.
        return fail(exit_codes.USAGE_ERROR, "--ephemeral starts a new session: no -c/--resume")
    if continue_last:
        from .commands.sessions import latest_session_id

        if resume:
            return fail(exit_codes.USAGE_ERROR, "--continue and --resume ID: give one of them")
        where = (cwd or Path.cwd()).expanduser().resolve()
        resume = latest_session_id(settings.sessions_dir, where)
        if resume is None:
            return fail(
                exit_codes.USAGE_ERROR,
                f"no session to continue in {where} (m3agent sessions lists them)",
            )
    # Mistakes that need no server first (exit 2), then what this install lacks, then the
    # server: each is named before the sandbox is probed and the snapshot built.
    try:
        workspace = session_workspace(settings, cwd, resume)
    except (ValueError, SessionLogError) as e:
        return fail(exit_codes.USAGE_ERROR, str(e))
    if (why := missing_backend(settings)) is not None:
        return fail(exit_codes.ENGINE_UNAVAILABLE, why)
    if settings.engine is EngineName.REMOTE:
        from .warm import remote_api_key

        if (why := unreachable(settings.base_url, remote_api_key(settings))) is not None:
            return fail(exit_codes.ENGINE_UNAVAILABLE, why)
    from m3agent.tools.mcp import McpLoginRequired

    from .progress_line import ProgressLine
    from .sandbox_consent import ConsentRefused, consent_for

    # Which server runs the model and how far the snapshot got: stderr, see progress_line.py.
    progress = ProgressLine(sys.stderr)
    try:
        consent_for(settings, workspace)
        try:
            session = build_session(
                settings,
                cwd=workspace,
                script=script,
                resume=resume,
                progress=progress,
                start_server=True,
                attach=not overrides.in_process,
                mcp_login_fatal=True,
            )
        finally:
            progress.close()  # before an error line: no half-written progress in front of it
    except ConsentRefused as e:
        return fail(exit_codes.SANDBOX_UNAVAILABLE, str(e))
    except McpLoginRequired as e:
        return fail(exit_codes.MCP_LOGIN, str(e))
    except (ValueError, SessionLogError) as e:
        return fail(exit_codes.USAGE_ERROR, str(e))
    except EngineUnavailable as e:
        return fail(exit_codes.ENGINE_UNAVAILABLE, str(e))
    except EngineError as e:
        return fail(exit_codes.INTERNAL_ERROR, str(e))

    from .extensions import expand_turn

    session.gate.mode = mode  # the gate's: it binds the session's task children too
    try:
        turn = expand_turn(session, turn)  # `/name args`: a custom command, skill or MCP prompt
    except ValueError as e:
        asyncio.run(session.engine.close())
        return fail(exit_codes.USAGE_ERROR, str(e))
    approver = headless_approver(settings.approval, settings.home, Path(session.cwd))

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
            return await run_headless(
                session,
                turn,
                renderer,
                approver,
                last_message_file=last_message_file,
                more_turns=more,
                schema=schema,
            )
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            await session.engine.close()
            if options.ephemeral:
                forget_session(settings.sessions_dir, session.id)

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
