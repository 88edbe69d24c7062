"""The composition root: settings -> engine + toolset + sandbox + checkpoints -> Session.

One function per engine backend, each importing its backend lazily so that a missing optional
dependency (torch, vllm) only matters when that backend is asked for. Front ends (headless,
TUI) and tests build sessions here.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.agent.conversation import Conversation
from m3agent.agent.events import ContextAction, ErrorKind, Progress
from m3agent.agent.session import Session
from m3agent.engine.api import LOCAL_ENGINES, Engine, EngineName, EngineUnavailable

from .settings import Settings
from .warm import local_chat_files, user_model_dirs

if TYPE_CHECKING:  # types only: each loads when it is built
    from m3agent.agent.context import SnapshotConfig
    from m3agent.agent.events import Error
    from m3agent.engine.m3.tokenizer import M3Tokenizer
    from m3agent.tools.sandbox.runner import Sandbox
    from m3agent.tools.toolset import Toolset, ToolsetProtocol

DEFAULT_REMOTE_MODEL = "MiniMaxAI/MiniMax-M3"
# progress(event): Progress events of the snapshot, the model load and the background server.
Report = Callable[[Progress], None]


def _import_backend(module: str, cls: str, engine: str) -> Any:
    try:
        mod = importlib.import_module(f"m3agent.engine.backends.{module}")
    except ImportError as e:
        from .missing_extra import missing_extra

        hint = missing_extra(e) or str(e)
        raise EngineUnavailable(
            f"the {engine} engine is unavailable in this install: {hint}"
        ) from e
    try:
        return getattr(mod, cls)
    except AttributeError as e:
        raise EngineUnavailable(
            f"the {engine} engine is unavailable: no {cls} in {mod.__name__}"
        ) from e


def _scripted(settings: Settings, script: Path | None, progress: Report | None = None) -> Engine:
    from m3agent.engine.backends.scripted import ScriptedEngine

    if script is None:
        raise ValueError("--engine scripted needs --script FILE (a JSON array of strings)")
    return ScriptedEngine.from_file(script)


def _remote(settings: Settings, script: Path | None, progress: Report | None = None) -> Engine:
    from m3agent.engine.backends.remote import RemoteEngine

    return RemoteEngine(
        settings.base_url,
        settings.model or DEFAULT_REMOTE_MODEL,
        api_key=settings.api_key,
        timeout=settings.request_timeout_s,
        retries=settings.retries,
        **local_chat_files(settings.model),
    )


def _model_dir(settings: Settings, engine: str) -> Path:
    if not settings.model:
        raise ValueError(f"--engine {engine} needs --model DIR (a model checkpoint directory)")
    from m3agent.engine.model_source import resolve_model

    # A local directory or a hub repo id; a wrong or incomplete checkpoint is named here.
    return resolve_model(settings.model, model_dirs=user_model_dirs(settings)).path


def _native(settings: Settings, script: Path | None, progress: Report | None = None) -> Engine:
    model_dir = _model_dir(settings, "native")
    engine_cls = _import_backend("native", "NativeEngine", "native")
    device = settings.device
    if device is None:
        import torch  # present whenever the native backend imported

        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = settings.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    offload = _offload(settings, model_dir, device)
    if progress is None:
        return engine_cls.from_model_dir(model_dir, device=device, dtype=dtype, offload=offload)
    from .warm import load_progress

    return engine_cls.from_model_dir(
        model_dir,
        device=device,
        dtype=dtype,
        progress=lambda done, total: progress(load_progress(done, total)),
        offload=offload,
    )


def _offload(settings: Settings, model_dir: Path, device: str) -> Any:
    """The plan's expert offload for this run (None: all on the device); says why on stderr."""
    from m3agent.engine.offload.choose import choose_offload

    choice = choose_offload(
        model_dir,
        device,
        settings.offload_experts,
        settings.expert_form,
        settings.hot_experts,
        settings.prefill_stream_tokens,
    )
    if choice.config is not None:
        import sys

        print(f"native: {choice.reason}", file=sys.stderr)
    return choice.config


def _vllm(settings: Settings, script: Path | None, progress: Report | None = None) -> Engine:
    model_dir = _model_dir(settings, "vllm")
    # Default M3 arguments (SPEC §6.2); `m3agent serve --engine vllm` exposes the options.
    return _import_backend("vllm", "VllmEngine", "vllm").from_model_dir(model_dir)


ENGINE_BUILDERS: dict[EngineName, Callable[[Settings, Path | None, Report | None], Engine]] = {
    EngineName.SCRIPTED: _scripted,
    EngineName.REMOTE: _remote,
    EngineName.NATIVE: _native,
    EngineName.VLLM: _vllm,
}


def attach_to_server(settings: Settings) -> Engine | None:
    """A RemoteEngine on a running `m3agent serve` of the same model, else None (the code is
    in app/warm.py; kept here for callers of the factory)."""
    from .warm import attach_to_server as attach

    return attach(settings)


def build_engine(
    settings: Settings,
    *,
    script: Path | None = None,
    attach: bool = True,
    start_server: bool = False,
    progress: Report | None = None,
) -> Engine:
    """ValueError for a usage mistake; EngineUnavailable when the backend cannot be had.

    attach: use a running `m3agent serve` of the same model instead of loading it again.
    start_server: for native/vllm with `warm` on (the default), start that server when none
    runs (app/warm.py) so that the prefix cache outlives this process; run and the TUI ask
    for it, tests and `serve` itself do not. progress: Progress events while it loads."""
    builder = ENGINE_BUILDERS[settings.engine]  # Settings holds only EngineName members
    if attach:
        from .warm import attach_to_server, server_engine, wants_server

        if start_server and wants_server(settings):
            return server_engine(settings, progress)
        if (server := attach_to_server(settings, progress)) is not None:
            return server
    return builder(settings, script, progress)


def build_sandbox(settings: Settings, cwd: Path) -> Sandbox:
    from m3agent.tools.sandbox.policy import SandboxPolicy
    from m3agent.tools.sandbox.runner import Sandbox

    # One Sandbox per session: its layers are probed once, not per command.
    extra = tuple(Path(d).expanduser().resolve() for d in settings.add_dirs)
    for d in extra:
        if not d.is_dir():
            raise ValueError(f"--add-dir {d}: not a directory")
    rules = _rule_fields(settings)
    return Sandbox(
        SandboxPolicy(
            workspace=cwd,
            mode=settings.sandbox,
            **{
                **rules,
                "network": settings.network or rules.get("network", False),
                "extra_writable": (*extra, *rules.get("extra_writable", ())),
            },
            dangerously_no_sandbox=settings.dangerously_no_sandbox,
        )
    )


def _rule_fields(settings: Settings) -> dict[str, Any]:
    """The config's [sandbox] rules as SandboxPolicy fields (tools/sandbox/rules.py)."""
    return settings.sandbox_rules.policy_fields() if settings.sandbox_rules else {}


def build_toolset(settings: Settings, cwd: Path) -> Toolset:
    from m3agent.tools.toolset import default_toolset

    return default_toolset()


def build_mcp_toolset(
    settings: Settings, cwd: Path, sandbox: Sandbox, base: Toolset, *, login_fatal: bool = False
) -> tuple[ToolsetProtocol, list[Error]]:
    """The base tools plus the configured MCP servers' tools (servers started now: the tool
    set is fixed for the session), and the events saying which servers were left out.
    login_fatal: an HTTP server that needs `m3agent mcp login` raises McpLoginRequired."""
    from m3agent.agent.events import Error

    config = settings.mcp_config(cwd)
    notes = [Error(message=line, kind=ErrorKind.TOOL) for line in config.skipped]
    if not config.servers:
        return base, notes
    from importlib.metadata import PackageNotFoundError, version

    from m3agent.tools.mcp import start_mcp

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
        from m3agent.tools.mcp import McpLoginRequired

        started.toolset.close()
        raise McpLoginRequired(started.needs_login[0])
    notes += [Error(message=why, kind=ErrorKind.TOOL) for why in started.errors.values()]
    return started.toolset, notes


def build_checkpoint(settings: Settings, cwd: Path) -> Callable[[str], Any]:
    """snapshot(label) of the workspace, taken before the first mutating call of each turn.
    The store is the one `m3agent undo` and the TUI's /undo read (same state dir)."""
    from m3agent.tools.checkpoint import Checkpoints, state_dir_for

    return Checkpoints(cwd, state_dir_for(cwd, settings.checkpoints_dir)).snapshot


def snapshot_tokenizer(settings: Settings) -> M3Tokenizer:
    """The model's tokenizer when there is a model directory, else the bundled M3 one."""
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    if settings.engine in LOCAL_ENGINES and settings.model:
        path = Path(settings.model).expanduser()
        if (path / "tokenizer.json").is_file():
            return M3Tokenizer.from_model_dir(path)
    return M3Tokenizer.default()


def snapshot_config(
    settings: Settings, max_context_tokens: int, budget: int | None = None
) -> SnapshotConfig | None:
    """SnapshotConfig from settings; None when the budget leaves no room for a snapshot."""
    from m3agent.agent.context import SnapshotConfig
    from m3agent.agent.context.files import FileRules

    budget = budget or settings.context_budget or max_context_tokens - settings.context_reserve
    if budget < 1:
        return None
    from .extensions import SNAPSHOT_SKIP

    # Skills, commands and agent files reach the model only when used (issue 23).
    skip = (*settings.context_skip, *SNAPSHOT_SKIP)
    rules = FileRules(skip, settings.context_max_file_bytes)
    return SnapshotConfig(budget, rules, settings.home / "context-cache")


def _context(
    settings: Settings, cwd: Path, engine: Engine, *, new: bool, progress: Report | None = None
) -> dict[str, Any]:
    """Session kwargs for the repository snapshot: its message and event (a new session only:
    a resumed one has its snapshot in the log), a refresher, the auto-compaction point."""
    if not settings.context:
        return {}
    from m3agent.agent.context import build_snapshot
    from m3agent.agent.events import ContextEvent

    info = engine.info()
    config = snapshot_config(settings, info.max_context_tokens)
    if config is None:
        return {}
    tokenizer = snapshot_tokenizer(settings)

    def take(report: Report | None = None) -> Any:
        return build_snapshot(cwd, tokenizer, config, progress=report)

    out: dict[str, Any] = {
        "snapshot_builder": lambda report=None: take(report).message(),
        "auto_compact_tokens": max(1, int(info.max_context_tokens * 0.9)),
    }
    if not new:
        return out
    snap = take(progress)
    if snap.entries("included") or snap.instructions or snap.entries("listed"):
        detail = {"files": len(snap.entries("included")), **snap.summary()}
        out["context_messages"] = [snap.message()]
        out["startup_events"] = [ContextEvent(action=ContextAction.SNAPSHOT, detail=detail)]
    return out


def _instructions(settings: Settings, cwd: Path, context: dict[str, Any]) -> dict[str, Any]:
    """The user's and the parent directories' AGENTS.md / CLAUDE.md and their @imports, one
    system message after the snapshot (agent/instructions.py)."""
    from m3agent.agent.events import ContextEvent
    from m3agent.agent.instructions import find_instructions, instructions_message_text
    from m3agent.engine.api import Message

    files = find_instructions(cwd, settings.user_instructions_file)
    if not files:
        return {}
    message = Message(role="system", content=instructions_message_text(files))
    event = ContextEvent(
        action=ContextAction.INSTRUCTIONS, detail={"files": [f"{f.scope}: {f.path}" for f in files]}
    )
    return {
        "context_messages": [*context.get("context_messages", ()), message],
        "startup_events": [*context.get("startup_events", ()), event],
    }


def build_session(
    settings: Settings,
    *,
    cwd: Path | None = None,
    engine: Engine | None = None,
    toolset: ToolsetProtocol | None = None,
    script: Path | None = None,
    resume: str | None = None,
    checkpoint: Callable[[str], Any] | None = None,
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
    # A bad session id is a usage error to report before any engine is loaded.
    meta = Conversation.load(settings.sessions_dir, resume, repair=False).meta if resume else None
    if cwd is None:
        # A resumed session goes on where it ran; a new one starts here.
        cwd = Path(meta.cwd) if meta is not None else Path.cwd()
    cwd = Path(cwd).resolve()
    if not cwd.is_dir():
        raise ValueError(f"working directory {cwd} does not exist")
    if not settings.allow_home:  # the whole home as a workspace: its secrets in reach
        from m3agent.agent.context.guard import workspace_refusal

        if (why := workspace_refusal(cwd)) is not None:
            raise ValueError(why)
    from m3agent.tools.private_fs import private_dir

    private_dir(settings.home)  # before anything (the token cache, the log) lands in it
    sandbox = build_sandbox(settings, cwd)  # before the engine: a bad --add-dir fails fast
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
    if checkpoint is None:
        checkpoint = build_checkpoint(settings, cwd)
    config = settings.agent_config()
    from .extensions import session_extras
    from .mcp_settings import persist_allow

    # Hooks, skills, the plan and task tools (issue 23): one call, app/extensions.py.
    extras = session_extras(settings, cwd, engine, toolset, config)
    toolset, config = extras.toolset, extras.config

    common = {
        "sandbox": sandbox,
        "checkpoint": checkpoint,
        "persist_allow": lambda tool: persist_allow(settings.home, tool),
        "hooks": extras.hooks,
    }
    try:
        context = _context(settings, cwd, engine, new=not resume, progress=progress)
        context["startup_events"] = [
            *context.get("startup_events", ()),
            *mcp_notes,
            *extras.notes,
        ]
        if not resume:  # a resumed session has its instructions in its log
            context.update(_instructions(settings, cwd, context))
        if resume:
            session = Session.resume(
                resume,
                engine,
                toolset,
                config,
                sessions_dir=settings.sessions_dir,
                cwd=cwd,
                **common,
                **context,
            )
        else:
            session = Session.create(
                engine,
                toolset,
                config,
                sessions_dir=settings.sessions_dir,
                cwd=cwd,
                **common,
                **context,
            )
        extras.bind(session)  # the task tool runs its children beside this session
        return session
    except BaseException:
        toolset.close()  # MCP servers started above must not leak
        raise
