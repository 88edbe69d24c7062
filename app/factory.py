"""The composition root: settings -> engine + toolset + sandbox + checkpoints -> Session.

The engine is built in app/engine_build.py, the snapshot and instruction messages in
app/session_context.py; the sandbox, tools and checkpoints here. Front ends (headless, TUI) and
tests build sessions here.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from m3agent.agent.context.guard import workspace_refusal
from m3agent.agent.conversation import Conversation
from m3agent.agent.events import Error, ErrorKind
from m3agent.agent.session import Session
from m3agent.agent.session_options import SessionOptions
from m3agent.agent.turn_state import CheckpointStore
from m3agent.engine.api import Engine
from m3agent.tools.checkpoint import Checkpoints, state_dir_for
from m3agent.tools.diagnostics import Diagnostics
from m3agent.tools.host_programs import confine_process_path
from m3agent.tools.private_fs import private_dir
from m3agent.tools.sandbox.runner import Sandbox
from m3agent.tools.toolset import Toolset, ToolsetProtocol, default_toolset
from m3agent.tools.web_fetch import WebFetch

from .engine_build import Report, build_engine
from .extensions import session_extras
from .permission_store import persist_allow
from .prefix_rules import load_prefixes, save_prefix, saved_rules
from .sandbox_settings import extra_dirs, sandbox_policy
from .session_context import add_instructions, repository_opening
from .settings import Settings
from .web_fetch_settings import fetch_policy

# build_engine (app/engine_build.py) and sandbox_policy (app/sandbox_settings.py) are kept
# importable from here: the TUI launcher and the status line use them.
__all__ = [
    "build_checkpoints",
    "build_engine",
    "build_mcp_toolset",
    "build_sandbox",
    "build_session",
    "build_toolset",
    "sandbox_policy",
    "session_workspace",
]


def build_sandbox(settings: Settings, cwd: Path) -> Sandbox:
    # One Sandbox per session: its layers are probed once, not per command.
    return Sandbox(sandbox_policy(settings, cwd))


def session_workspace(settings: Settings, cwd: Path | None, resume: str | None) -> Path:
    """The directory a session opens in, after every check that needs neither the engine nor
    a server: the --resume log loads, the directory exists and may be a workspace, the
    --add-dir directories exist. ValueError or SessionLogError (usage mistakes, exit 2);
    front ends call it before they contact a server, and build_session calls it again."""
    meta = Conversation.load(settings.sessions_dir, resume, repair=False).meta if resume else None
    if cwd is None:
        # A resumed session goes on where it ran; a new one starts here.
        cwd = Path(meta.cwd) if meta is not None else Path.cwd()
    cwd = Path(cwd).expanduser().resolve()
    if not cwd.is_dir():
        raise ValueError(f"working directory {cwd} does not exist")
    if not settings.allow_home:  # the whole home as a workspace: its secrets in reach
        if (why := workspace_refusal(cwd)) is not None:
            raise ValueError(why)
    extra_dirs(settings)
    return cwd


def build_toolset(settings: Settings, cwd: Path) -> Toolset:
    """The built-in tools; web_fetch after them when the config allows a domain."""
    tools = default_toolset()
    policy = fetch_policy(settings, cwd)
    if policy is None:
        return tools
    return Toolset([*tools.tools(), WebFetch(policy)])


def build_mcp_toolset(
    settings: Settings, cwd: Path, sandbox: Sandbox, base: Toolset, *, login_fatal: bool = False
) -> tuple[ToolsetProtocol, list[Error]]:
    """The base tools plus the configured MCP servers' tools (servers started now: the tool
    set is fixed for the session), and the events saying which servers were left out.
    login_fatal: an HTTP server that needs `m3agent mcp login` raises McpLoginRequired."""
    config = settings.mcp_config(cwd)
    notes = [Error(message=line, kind=ErrorKind.TOOL) for line in config.skipped]
    if not config.servers:
        return base, notes
    from m3agent.tools.mcp import start_mcp  # MCP's client (70 ms): only with servers

    try:
        ours = version("m3agent")
    except PackageNotFoundError:
        ours = "0"
    started = start_mcp(
        base,
        config,
        sandbox=sandbox,
        workspace=cwd,
        media_dir=settings.home / "mcp-media",
        client_version=ours,
    )
    if login_fatal and started.needs_login:
        from m3agent.tools.mcp import McpLoginRequired  # MCP's client: as start_mcp

        started.toolset.close()
        raise McpLoginRequired(started.needs_login[0])
    notes += [Error(message=why, kind=ErrorKind.TOOL) for why in started.errors.values()]
    return started.toolset, notes


def _diagnostics(settings: Settings) -> Diagnostics | None:
    if settings.diagnostics is None:
        return None
    return Diagnostics(settings.diagnostics)


def build_checkpoints(settings: Settings, cwd: Path) -> Checkpoints:
    """The workspace's checkpoint store: a snapshot before the first mutating call of each
    turn, the one `m3agent undo` and the TUI's /undo and /rewind read (same state dir)."""
    return Checkpoints(cwd, state_dir_for(cwd, settings.checkpoints_dir))


def build_session(
    settings: Settings,
    *,
    cwd: Path | None = None,
    engine: Engine | None = None,
    toolset: ToolsetProtocol | None = None,
    script: Path | None = None,
    resume: str | None = None,
    checkpoints: CheckpointStore | None = None,
    progress: Report | None = None,
    start_server: bool = False,
    attach: bool = True,
    mcp_login_fatal: bool = False,
) -> Session:
    """The seam front ends and tests use; pass `engine`/`toolset` to use ready-made ones.

    progress: Progress events (background server, model load, snapshot) while it opens;
    start_server / attach: as build_engine's (run and the TUI start a server by default);
    mcp_login_fatal: headless runs stop (McpLoginRequired) before the engine loads when an
    HTTP MCP server needs a login."""
    # A bad session id or directory is a usage error to report before any engine is loaded.
    cwd = session_workspace(settings, cwd, resume)
    private_dir(settings.home)  # before anything (the token cache, the log) lands in it
    sandbox = build_sandbox(settings, cwd)  # before the engine: a bad --add-dir fails fast
    # nothing this process starts on the host (a compiler, the background serve) is found in
    # a directory the model writes (tools/host_programs.py)
    confine_process_path(sandbox.policy.writable_roots())
    mcp_notes: list[Error] = []
    if toolset is None and mcp_login_fatal:  # a login that is needed: said before any load
        toolset, mcp_notes = build_mcp_toolset(
            settings, cwd, sandbox, build_toolset(settings, cwd), login_fatal=True
        )
    if engine is None:
        engine = build_engine(
            settings, script=script, attach=attach, start_server=start_server, progress=progress
        )
    if toolset is None:
        toolset, mcp_notes = build_mcp_toolset(settings, cwd, sandbox, build_toolset(settings, cwd))
    if checkpoints is None:
        checkpoints = build_checkpoints(settings, cwd)
    config = settings.agent_config()
    # Hooks, skills, the plan and task tools (issue 23): one call, app/extensions.py.
    extras = session_extras(settings, cwd, engine, toolset, config, sandbox)
    toolset, config = extras.toolset, extras.config

    common: SessionOptions = {
        "sandbox": sandbox,
        "checkpoints": checkpoints,
        "persist_allow": lambda tool: persist_allow(settings.home, tool),
        # saved shell prefixes (the user's; a trusted project's): the gate answers with them
        # for every front end (agent/shell_prefixes.py)
        "shell_prefixes": load_prefixes(settings.home, cwd)[0],
        "persist_prefix": lambda prefix: save_prefix(settings.home, prefix),
        "hooks": extras.hooks,
        "diagnostics": _diagnostics(settings),
        "extensions": extras,  # the session keeps them (commands_of reads them there)
    }
    try:
        opening = repository_opening(settings, cwd, engine, new=not resume, progress=progress)
        opening.events += [*mcp_notes, *extras.notes]
        if not resume:  # a resumed session has its instructions in its log
            add_instructions(opening, settings, cwd)
        options = common | opening.options
        options["startup_events"] = opening.events
        if resume:
            session = Session.resume(
                resume,
                engine,
                toolset,
                config,
                sessions_dir=settings.sessions_dir,
                cwd=cwd,
                **options,
            )
        else:
            session = Session.create(
                engine,
                toolset,
                config,
                sessions_dir=settings.sessions_dir,
                cwd=cwd,
                context_messages=opening.messages,
                **options,
            )
        extras.bind(session)  # the task tool runs its children beside this session
        # Saved path rules (the user's, a trusted project's): the gate's for every front end.
        session.gate.set_saved(tuple(saved_rules(settings.home, cwd)[0]))
        return session
    except BaseException:
        toolset.close()  # MCP servers started above must not leak
        raise
