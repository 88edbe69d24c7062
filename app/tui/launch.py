"""From command-line flags to a running TUI: settings, the session factory, the services
behind /sessions, /undo and /context. The only TUI module that knows about app/factory."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from m3agent.agent.conversation import Conversation, SessionLogError
from m3agent.agent.session_index import latest_session_id
from m3agent.agent.session_index import list_sessions as _list
from m3agent.tools.private_fs import write_private

from .. import exit_codes
from ..media_support import reads_media, text_only_error
from ..safe_text import visible
from ..sandbox_consent import ConsentRefused, consent_for
from ..settings import load_settings, save_settings
from ..status_line import load_status_line
from .exit_server import on_exit
from .ports import (
    Progress,
    SessionFactory,
    SessionLike,
    SessionRow,
    SetupPort,
    TuiConfig,
)

if TYPE_CHECKING:
    from m3agent.agent.events import Progress as ProgressEvent
    from m3agent.engine.api import Engine
    from m3agent.tools.sandbox.policy import SandboxLayer

    from ..settings import Overrides, Settings
    from .onboarding import SetupChoice


def launch(
    overrides: Overrides,
    *,
    script: Path | None,
    cwd: Path | None,
    resume: str | None,
    continue_last: bool = False,
    worktree: str | None = None,
    inline: bool = False,
) -> int:
    def fail(message: str) -> int:
        print(f"error: {visible(message)}", file=sys.stderr)
        return exit_codes.USAGE_ERROR

    try:
        settings = overrides.apply(load_settings())
        if worktree is not None:  # --worktree NAME: the workspace is that worktree
            from ..worktree import make_worktree, plan_worktree

            tree = plan_worktree(cwd or Path.cwd(), worktree)
            if not _on_a_terminal():  # nothing is made for a screen that cannot open
                raise ValueError(NEEDS_TERMINAL)
            tree = make_worktree(tree)
            print(visible(tree.describe()), file=sys.stderr)
            cwd = tree.path
        resume, cwd = _pick_session(settings, cwd, resume, continue_last)
        config = replace(tui_config(settings, cwd=cwd, resume=resume), inline=inline)
    except ValueError as e:
        return fail(str(e))
    if script is not None and not script.is_file():
        return fail(f"script {script} does not exist")

    if not _on_a_terminal():
        return fail(NEEDS_TERMINAL)

    from .onboarding import needs_setup
    from .run import run_tui

    try:  # before the screen is taken: a question on the plain terminal
        consent_for(settings, config.cwd)
    except ConsentRefused as e:
        print(f"error: {visible(str(e))}", file=sys.stderr)
        return exit_codes.SANDBOX_UNAVAILABLE

    if needs_setup(settings, overrides.given(), script):  # first run: ask instead of failing
        config = replace(config, setup=setup_port(settings, config.cwd))
    code = run_tui(session_factory(settings, config.cwd, script), config)

    try:  # the first-run screen may have saved an engine since: read the config again
        after = overrides.apply(load_settings())
    except ValueError:
        after = settings
    on_exit(after)
    return code


NEEDS_TERMINAL = "the terminal UI needs a terminal; for scripts and pipes use `m3agent run PROMPT`"


def _on_a_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def setup_port(settings: Settings, cwd: Path) -> SetupPort:
    """The onboarding screen's services over the real settings: probes, and the choice saved
    to the config file (the demo writes nothing but its script, in the data home)."""
    from .onboarding import check_model_dir, demo_script, probe_server, running_servers

    def complete(choice: SetupChoice) -> tuple[SessionFactory, str]:
        values = choice.settings()
        if not values:
            demo = settings.home / "demo-script.json"
            write_private(demo, json.dumps(demo_script()))  # the data home holds only 0600
            return (
                session_factory(settings.override(engine="scripted"), cwd, demo),
                "starting the scripted demo; nothing was saved",
            )
        save_settings(settings.config_path, values)
        chosen = settings.override(**values)
        return (
            session_factory(chosen, cwd, None),
            f"saved {choice.describe()} to {settings.config_path}",
        )

    return SetupPort(
        probe=lambda url, key: probe_server(url, key or _server_key(settings, url)),
        check_dir=check_model_dir,
        servers=lambda: running_servers(settings.home),
        complete=complete,
    )


def _server_key(settings: Settings, url: str) -> str | None:
    """The key a probe of `url` sends when none was typed: the configured one, or the token
    of this data home's `m3agent serve` there (found again at every start, never saved)."""
    from ..warm import remote_api_key

    try:
        return remote_api_key(settings.override(base_url=url.strip()))
    except ValueError:  # not a URL: probe_server says so
        return settings.api_key


def _pick_session(
    settings: Settings, cwd: Path | None, resume: str | None, continue_last: bool
) -> tuple[str | None, Path | None]:
    """--continue / --resume ID: the session id, checked before the screen opens (a bad id is
    one line and exit 2), and its workspace unless --cwd says otherwise."""
    if continue_last:
        if resume:
            raise ValueError("--continue and --resume ID: give one of them")
        where = (cwd or Path.cwd()).expanduser().resolve()
        resume = latest_session_id(settings.sessions_dir, where)
        if resume is None:
            raise ValueError(f"no session to continue in {where} (m3agent sessions lists them)")
    if not resume:
        return None, cwd

    try:
        meta = Conversation.load(settings.sessions_dir, resume).meta
    except SessionLogError as e:
        raise ValueError(str(e)) from None
    return resume, cwd if cwd is not None else Path(meta.cwd)


def tui_config(settings: Settings, *, cwd: Path | None, resume: str | None) -> TuiConfig:
    workspace = Path(cwd).expanduser().resolve() if cwd else Path.cwd().resolve()
    if not workspace.is_dir():
        raise ValueError(f"working directory {workspace} does not exist")

    status_line, note = load_status_line(settings, workspace)
    return TuiConfig(
        status_line=status_line,
        start_notes=(note,) if note else (),
        cwd=workspace,
        notify=settings.notify_method(),
        media_refusal=text_only_error(settings, "/attach")
        if reads_media(settings) is False
        else None,
        engine=settings.engine,
        model=_model_label(settings.model),
        thinking=settings.thinking,
        approval=settings.approval,
        sandbox=settings.sandbox,
        resume=resume,
        state_dir=settings.home,
        instructions=settings.context,
        list_sessions=lambda: list_sessions(settings.sessions_dir),
        probe_sandbox=sandbox_layers,
    )


def session_factory(settings: Settings, cwd: Path, script: Path | None) -> SessionFactory:
    """The factory the app calls in its loading thread. The engine (weights, GPU memory) is
    built once; resuming another session from /sessions reuses it."""
    engines: list[Engine] = []

    def build(resume_id: str | None, progress: Progress) -> SessionLike:
        from ..factory import build_engine, build_session

        def report(p: ProgressEvent) -> None:  # factory Progress events -> the loading view's line
            progress(p.message, p.fraction)

        if not engines:
            progress(f"loading the {settings.engine} engine…", None)
            # native/vllm: a background `m3agent serve` (app/warm.py) unless warm = false.
            engines.append(
                build_engine(settings, script=script, start_server=True, progress=report)
            )
        progress("opening the session (repository snapshot)…", None)
        return build_session(
            settings, cwd=cwd, engine=engines[0], resume=resume_id, progress=report
        )

    return build


def list_sessions(sessions_dir: Path) -> list[SessionRow]:

    # Sessions opened and left without a prompt have nothing to resume: not listed.
    return [
        SessionRow(
            session_id=s.id,
            title=s.first_prompt.splitlines()[0] + (" (fork)" if s.forked_from else ""),
            turns=s.messages,
            updated=s.created[:16].replace("T", " "),
        )
        for s in _list(sessions_dir)
        if s.first_prompt.strip()
    ]


def sandbox_layers(session: SessionLike) -> tuple[SandboxLayer, ...]:
    """The layers really active for the session's sandbox (probed at its construction)."""
    if session.sandbox is None:
        return ()
    return tuple(session.sandbox.active_layers())


def _model_label(model: str | None) -> str:
    if not model:
        return ""
    return Path(model).name or model
