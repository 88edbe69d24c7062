"""What runs behind `m3agent run`'s flags (and `m3agent review`'s): the checks that need no
server first (exit 2), then what this install lacks, then the server; the session built; the
turn run headless. Every failure is one line with a documented exit code (app/exit_codes.py).

execute() runs those phases in that order, one function each; a phase that refuses the run
raises _Refused and execute() reports it once (_report), so every refusal is written the
same way whatever phase found it. The CLI imports this module only when `run` (or `review`)
runs; what only some runs need (the media checks' pillow and av) is imported by its phase."""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.agent.conversation import SessionLogError
from m3agent.agent.ops import Interrupt, UserTurn
from m3agent.agent.session_index import latest_session_id
from m3agent.engine.api import EngineError, EngineName, EngineUnavailable, MediaPart

from . import exit_codes
from .engine_build import missing_backend
from .extensions import expand_turn
from .factory import build_session, session_workspace
from .headless import make_renderer, run_headless
from .headless_approvals import headless_approver
from .headless_result import early_error_line
from .media_support import reads_media, text_only_error
from .permission_modes import check_mode, plan_text, tool_flag_rules
from .prefix_rules import saved_rules
from .progress_line import ProgressLine
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
from .sandbox_consent import ConsentRefused, consent_for
from .settings import load_settings
from .warm import remote_api_key
from .worktree import WorktreeError, enter_worktree

if TYPE_CHECKING:
    from m3agent.agent.session import Session

    from .headless import Renderer
    from .headless_approvals import Approver
    from .settings import Overrides, Settings


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


class _Refused(Exception):
    """The run stops before its turn: the exit code and the one line that says why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _usage_error(e: Exception) -> _Refused:
    return _Refused(exit_codes.USAGE_ERROR, str(e))


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
    """Everything behind the flags, phase by phase; returns the exit code. A caller with its
    own answer format (`m3agent review`) hands in the SCHEMA the answer must satisfy and the
    RENDERER that shows it."""
    try:
        prompts = _read_prompts(prompt, options.input_format)
        if options.output_schema is not None:  # the flag's schema replaces the caller's
            schema = _load_schema(options.output_schema)
        if options.worktree is not None:  # the session's workspace is that worktree
            cwd = _enter_worktree(cwd, options.worktree)
        media = _attachments(images, videos)
        settings, mode = _run_settings(overrides, options, cwd)
        renderer = renderer or _renderer(options.output_format)
        turn, more = _user_turns(prompts, mode, schema, media, settings, overrides)
        _check_media_and_output(settings, media, options.output_last_message)
        resume = _session_to_resume(settings, cwd, resume, continue_last, options.ephemeral)
        # Mistakes that need no server first (exit 2), then what this install lacks, then the
        # server: each is named before the sandbox is probed and the snapshot built.
        workspace = _check_before_opening(settings, cwd, resume)
        session = _open_session(settings, workspace, script, resume, not overrides.in_process)
        session.gate.set_mode(mode)  # the gate's: it binds the session's task children too
        turn = _expand_command(session, turn)
    except _Refused as r:
        return _report(options.output_format, r)

    approver = headless_approver(settings.approval, settings.home)
    forget = settings.sessions_dir if options.ephemeral else None
    return _run_turns(
        session,
        turn,
        more,
        renderer,
        approver,
        last_message_file=options.output_last_message,
        schema=schema,
        forget_in=forget,
    )


def _report(output_format: str, refused: _Refused) -> int:
    """The refusal on stderr, and as one JSON line on stdout where stdout is JSON."""
    sys.stderr.write(f"error: {visible(refused.message)}\n")  # it may quote a file name
    if output_format in ("json", "stream-json"):  # a script reading stdout sees it too
        sys.stdout.write(early_error_line(refused.code, refused.message))
        sys.stdout.flush()
    return refused.code


def _read_prompts(prompt: str | None, input_format: str) -> list[str]:
    """The prompts to run, in order (stream-json input may hold several); never empty."""
    input_format = input_format or "text"
    if input_format not in INPUT_FORMATS:
        raise _Refused(
            exit_codes.USAGE_ERROR,
            f"unknown input format {input_format!r} (use one of {', '.join(INPUT_FORMATS)})",
        )
    try:
        first, more = read_prompts(prompt, input_format)
    except ValueError as e:
        raise _usage_error(e) from e
    if not first.strip():
        raise _Refused(exit_codes.USAGE_ERROR, "the prompt is empty")
    return [first, *more]


def _load_schema(path: Path) -> dict[str, Any]:
    try:
        return load_schema(path)
    except ValueError as e:
        raise _usage_error(e) from e


def _enter_worktree(cwd: Path | None, name: str) -> Path:
    """--worktree: the git worktree the session works in, said on stderr."""
    try:
        tree = enter_worktree(cwd or Path.cwd(), name)
    except WorktreeError as e:
        raise _usage_error(e) from e
    sys.stderr.write(f"{visible(tree.describe())}\n")
    return tree.path


def _attachments(images: list[Path], videos: list[Path]) -> tuple[MediaPart, ...]:
    """--image and --video, checked now (exists, readable, within the limits)."""
    from m3agent.agent.attachments import AttachmentError, validate_attachments

    parts = [MediaPart("image", str(p)) for p in images]
    parts += [MediaPart("video", str(p)) for p in videos]
    try:
        return validate_attachments(parts) if parts else ()
    except AttachmentError as e:
        raise _usage_error(e) from e


def _run_settings(
    overrides: Overrides, options: RunOptions, cwd: Path | None
) -> tuple[Settings, str]:
    """The settings this run works with and its permission mode: the config with the flags
    over it, and the tool rules of the config, then the flags'."""
    try:
        settings = overrides.apply(load_settings())
        settings = append_system_prompt(settings, options.append_system_prompt)
        mode = check_mode(options.permission_mode or "default")
        if mode == "bypassPermissions":
            settings = settings.override(approval="never")
        flag_rules = tool_flag_rules(list(options.allowed_tools), list(options.disallowed_tools))
        settings = settings.override(rules=(*settings.rules, *flag_rules))
        # The saved rules (the user's, a trusted project's .m3agent/settings.json) are the
        # gate's, given by build_session; read here only to say which of them do not count.
        where = (cwd or Path.cwd()).expanduser().resolve()
        for note in saved_rules(settings.home, where)[1]:
            sys.stderr.write(f"note: {note}\n")
    except ValueError as e:
        raise _usage_error(e) from e
    return settings, mode


def _renderer(output_format: str) -> Renderer:
    try:
        return make_renderer(output_format)
    except ValueError as e:  # an unknown --output-format
        raise _usage_error(e) from e


def _user_turns(
    prompts: list[str],
    mode: str,
    schema: dict[str, Any] | None,
    media: tuple[MediaPart, ...],
    settings: Settings,
    overrides: Overrides,
) -> tuple[UserTurn, tuple[UserTurn, ...]]:
    """The first turn (with the attachments) and the ones after it, in the permission mode."""
    try:
        # The schema goes with the last prompt: the cached system prompt stays as it is.
        texts = [plan_text(t, mode) for t in prompts]
        if schema is not None:
            texts[-1] += schema_instruction(schema)
        # --thinking is this run's mode (settings.thinking, checked above, is the default).
        thinking = settings.thinking if overrides.thinking is not None else None
        turn = UserTurn(texts[0], media=tuple(media), thinking_mode=thinking)
        more = tuple(UserTurn(t, thinking_mode=thinking) for t in texts[1:])
    except ValueError as e:
        raise _usage_error(e) from e
    return turn, more


def _check_media_and_output(
    settings: Settings, media: tuple[MediaPart, ...], last_message_file: Path | None
) -> None:
    if media and reads_media(settings) is False:  # refused now, not as an HTTP 400 later
        raise _Refused(exit_codes.USAGE_ERROR, text_only_error(settings, "--image/--video"))
    if last_message_file is not None and not last_message_file.parent.is_dir():
        raise _Refused(exit_codes.USAGE_ERROR, f"-o {last_message_file}: no such directory")


def _session_to_resume(
    settings: Settings,
    cwd: Path | None,
    resume: str | None,
    continue_last: bool,
    ephemeral: bool,
) -> str | None:
    """The id of the session to go on with (--resume ID, or -c: the latest in this
    directory); None for a new one."""
    if ephemeral and (continue_last or resume):
        # Removing the log at the end would delete the session being continued.
        raise _Refused(exit_codes.USAGE_ERROR, "--ephemeral starts a new session: no -c/--resume")
    if not continue_last:
        return resume

    if resume:
        raise _Refused(exit_codes.USAGE_ERROR, "--continue and --resume ID: give one of them")
    where = (cwd or Path.cwd()).expanduser().resolve()
    latest = latest_session_id(settings.sessions_dir, where)
    if latest is None:
        raise _Refused(
            exit_codes.USAGE_ERROR,
            f"no session to continue in {where} (m3agent sessions lists them)",
        )
    return latest


def _check_before_opening(settings: Settings, cwd: Path | None, resume: str | None) -> Path:
    """The session's workspace (exit 2 where it is wrong), then whether this install can run
    the engine and a remote server answers (exit 3): before anything is started."""
    try:
        workspace = session_workspace(settings, cwd, resume)
    except (ValueError, SessionLogError) as e:
        raise _usage_error(e) from e
    if (why := missing_backend(settings)) is not None:
        raise _Refused(exit_codes.ENGINE_UNAVAILABLE, why)
    if settings.engine is EngineName.REMOTE:
        if (why := unreachable(settings.base_url, remote_api_key(settings))) is not None:
            raise _Refused(exit_codes.ENGINE_UNAVAILABLE, why)
    return workspace


def _open_session(
    settings: Settings, workspace: Path, script: Path | None, resume: str | None, attach: bool
) -> Session:
    """The sandbox consented to, the server started or attached to, the session opened;
    each failure under its own exit code."""
    from m3agent.tools.mcp import McpLoginRequired

    # Which server runs the model and how far the snapshot got: stderr, see progress_line.py.
    progress = ProgressLine(sys.stderr)
    try:
        consent_for(settings, workspace)
        try:
            return build_session(
                settings,
                cwd=workspace,
                script=script,
                resume=resume,
                progress=progress,
                start_server=True,
                attach=attach,
                mcp_login_fatal=True,
            )
        finally:
            progress.close()  # before an error line: no half-written progress in front of it
    except ConsentRefused as e:
        raise _Refused(exit_codes.SANDBOX_UNAVAILABLE, str(e)) from e
    except McpLoginRequired as e:
        raise _Refused(exit_codes.MCP_LOGIN, str(e)) from e
    except (ValueError, SessionLogError) as e:
        raise _usage_error(e) from e
    except EngineUnavailable as e:
        raise _Refused(exit_codes.ENGINE_UNAVAILABLE, str(e)) from e
    except EngineError as e:
        raise _Refused(exit_codes.INTERNAL_ERROR, str(e)) from e


def _expand_command(session: Session, turn: UserTurn) -> UserTurn:
    """`/name args`: a custom command, skill or MCP prompt; a refused one closes the engine
    the session opened."""
    try:
        return expand_turn(session, turn)
    except ValueError as e:
        asyncio.run(session.engine.close())
        raise _usage_error(e) from e


def _run_turns(
    session: Session,
    turn: UserTurn,
    more: tuple[UserTurn, ...],
    renderer: Renderer,
    approver: Approver,
    *,
    last_message_file: Path | None,
    schema: dict[str, Any] | None,
    forget_in: Path | None,
) -> int:
    """The turns run to their end; the engine closed (and, with `forget_in`, the
    --ephemeral session's log removed) however they end. Ctrl-C and a closed stdout get
    their own exit codes."""

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
            if forget_in is not None:
                forget_session(forget_in, session.id)

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
