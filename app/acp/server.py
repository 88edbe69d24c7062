"""The ACP agent: one warm engine, any number of editor sessions over it.

Each ACP session is an m3agent Session (its own log, so session/load resumes it), built by
the same factory as `run` and the TUI: hooks, skills, commands and the task tool included.
A pump task per session turns its events into session/update notifications; an approval
request becomes session/request_permission; session/cancel is an Interrupt.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import acp
from acp.helpers import ContentBlock
from acp.interfaces import Client
from acp.schema import (
    AcpMcpServer,
    AgentCapabilities,
    AvailableCommand,
    AvailableCommandInput,
    ClientCapabilities,
    HttpMcpServer,
    Implementation,
    InitializeResponse,
    LoadSessionResponse,
    McpServerStdio,
    NewSessionResponse,
    PromptCapabilities,
    PromptResponse,
    SessionMode,
    SessionModeState,
    SetSessionModeResponse,
    SseMcpServer,
    ToolCallUpdate,
    UnstructuredCommandInput,
)
from m3agent.agent import events as ev
from m3agent.agent import ops
from m3agent.agent.config import PermissionMode

from ..extensions import commands_of, expand_turn
from . import translate
from .editor_tools import Bridge, EditorToolset

if TYPE_CHECKING:
    from m3agent.agent.session import Session
    from m3agent.engine.api import Engine

    from ..settings import Settings

MODES = (
    SessionMode(
        id=PermissionMode.DEFAULT, name="Default", description="Reads, edits and runs commands"
    ),
    SessionMode(
        id=PermissionMode.PLAN, name="Plan", description="Read only: investigates and proposes"
    ),
)
# The MCP servers ACP's Agent interface takes (acp.interfaces.Agent).
McpServer = HttpMcpServer | SseMcpServer | AcpMcpServer | McpServerStdio
PLAN_NOTE = (
    "[plan mode: read only. Investigate with the read-only tools and answer with a plan; "
    "do not change files or run commands.]\n\n"
)


@dataclass(slots=True)
class Live:
    session: Session
    tools: EditorToolset
    pump: asyncio.Task[None] | None = None
    turn_done: asyncio.Future[ev.TurnComplete] | None = None
    tasks: set[asyncio.Task[None]] = field(default_factory=set)  # permission requests asked
    mcp_file: Path | None = None

    @property
    def mode(self) -> PermissionMode:
        """The session gate's: the one place the mode is kept (ApprovalGate.set_mode)."""
        return self.session.gate.mode


def _mcp_file(servers: list[McpServer]) -> Path | None:
    """The editor's MCP servers as a .mcp.json-style file for --mcp-config (the user put
    them in their editor's settings: trusted like a file named on the command line)."""
    if not servers:
        return None
    table: dict[str, Any] = {}
    for s in servers:
        d = s.model_dump(by_alias=True, exclude_none=True)
        if "command" in d:
            env = {e["name"]: e["value"] for e in d.get("env", [])}
            table[d["name"]] = {"command": d["command"], "args": d.get("args", []), "env": env}
        elif "url" in d:
            headers = {h["name"]: h["value"] for h in d.get("headers", [])}
            kind = d.get("type", "http")
            table[d["name"]] = {"type": kind, "url": d["url"], "headers": headers}
    fd, name = tempfile.mkstemp(prefix="m3agent-acp-mcp-", suffix=".json")
    with open(fd, "w", encoding="utf-8") as f:
        json.dump({"mcpServers": table}, f)
    return Path(name)


def _prompt_text(blocks: list[Any]) -> str:
    parts = []
    for b in blocks:
        kind = getattr(b, "type", "")
        if kind == "text":
            parts.append(b.text)
        elif kind == "resource":  # embedded context: a file the user dragged in
            res = b.resource
            text = getattr(res, "text", None)
            if text is not None:
                parts.append(f'<file uri="{res.uri}">\n{text}\n</file>')
        elif kind == "resource_link":
            parts.append(f"(see {b.uri})")
    return "\n".join(parts)


class M3AcpAgent:
    def __init__(
        self,
        settings: Settings,
        engine: Engine | None,
        version: str = "0",
        *,
        unavailable: str | None = None,
    ) -> None:
        """engine None: it could not be built, and `unavailable` says why; the handshake
        still completes and every session/new or session/load answers that reason."""
        self.settings = settings
        self.engine = engine
        self.unavailable = unavailable
        self.version = version
        self.conn: Client | None = None
        self.fs_read = self.fs_write = False
        self.live: dict[str, Live] = {}

    def on_connect(self, conn: Client) -> None:
        self.conn = conn

    @property
    def client(self) -> Client:
        """The editor's side of the connection: on_connect gives it before any request."""
        if self.conn is None:
            raise RuntimeError("the ACP connection is not open yet")
        return self.conn

    # ---- lifecycle ------------------------------------------------------------------------

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: ClientCapabilities | None = None,
        **kw: Any,
    ) -> InitializeResponse:
        fs = getattr(client_capabilities, "fs", None)
        self.fs_read = bool(getattr(fs, "read_text_file", False))
        self.fs_write = bool(getattr(fs, "write_text_file", False))
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(embedded_context=True),
            ),
            agent_info=Implementation(name="m3agent", title="m3agent", version=self.version),
        )

    async def authenticate(self, method_id: str, **kw: Any) -> None:
        return None

    async def new_session(
        self, cwd: str, mcp_servers: list[McpServer] | None = None, **kw: Any
    ) -> NewSessionResponse:
        live = await self._open(cwd, mcp_servers or [], resume=None)
        sid = live.session.id
        await self._announce(sid, live)
        return NewSessionResponse(session_id=sid, modes=self._modes(live))

    async def load_session(
        self, cwd: str, session_id: str, mcp_servers: list[McpServer] | None = None, **kw: Any
    ) -> LoadSessionResponse:
        live = await self._open(cwd, mcp_servers or [], resume=session_id)
        for u in translate.history_updates(live.session.messages):
            await self.client.session_update(session_id=session_id, update=u)
        await self._announce(session_id, live)
        return LoadSessionResponse(modes=self._modes(live))

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kw: Any
    ) -> SetSessionModeResponse:
        live = self._get(session_id)
        if mode_id not in {m.id for m in MODES}:
            raise acp.RequestError.invalid_params({"modeId": f"unknown mode {mode_id!r}"})
        # one operation: the gate's mode binds task children, MCP reads and the editor's tools
        live.session.gate.set_mode(mode_id)
        await self.client.session_update(
            session_id=session_id, update=acp.helpers.update_current_mode(mode_id)
        )
        return SetSessionModeResponse()

    async def prompt(
        self, session_id: str, prompt: list[ContentBlock], **kw: Any
    ) -> PromptResponse:
        live = self._get(session_id)
        if live.turn_done is not None and not live.turn_done.done():
            raise acp.RequestError.invalid_request({"reason": "a prompt is already running"})
        try:
            turn = expand_turn(live.session, ops.UserTurn(_prompt_text(prompt)))
        except ValueError as e:  # a command that may not run (an MCP prompt of a denied server)
            raise acp.RequestError.invalid_params({"reason": str(e)}) from None
        if live.mode is PermissionMode.PLAN:
            turn = replace(turn, text=PLAN_NOTE + turn.text)
        live.turn_done = asyncio.get_running_loop().create_future()
        live.session.submit(turn)
        done: ev.TurnComplete = await live.turn_done
        return PromptResponse(stop_reason=translate.stop_reason(done.reason))  # type: ignore[arg-type]

    async def cancel(self, session_id: str, **kw: Any) -> None:
        live = self.live.get(session_id)
        if live is not None:
            live.session.submit(ops.Interrupt())

    async def close_all(self) -> None:
        for live in list(self.live.values()):
            live.session.submit(ops.Shutdown())
            if live.pump is not None:
                await asyncio.gather(live.pump, return_exceptions=True)
            if live.mcp_file is not None:
                live.mcp_file.unlink(missing_ok=True)

    # ---- internals ------------------------------------------------------------------------

    def _get(self, session_id: str) -> Live:
        live = self.live.get(session_id)
        if live is None:
            raise acp.RequestError.invalid_params({"sessionId": f"no session {session_id}"})
        return live

    def _modes(self, live: Live) -> SessionModeState:
        return SessionModeState(current_mode_id=live.mode, available_modes=list(MODES))

    async def _open(self, cwd: str, servers: list[McpServer], resume: str | None) -> Live:
        from ..factory import build_session

        if self.engine is None:
            why = self.unavailable or "no engine"
            raise acp.RequestError(-32603, f"m3agent has no model: {why}", {"reason": why})
        mcp_file = _mcp_file(servers)
        settings = self.settings
        if mcp_file is not None:
            settings = settings.override(
                mcp_config_files=(*settings.mcp_config_files, str(mcp_file))
            )
        try:
            session = await asyncio.to_thread(
                build_session, settings, cwd=Path(cwd), engine=self.engine, resume=resume
            )
        except ValueError as e:
            raise acp.RequestError.invalid_params({"reason": str(e)}) from e
        loop = asyncio.get_running_loop()
        tools = EditorToolset(
            session.toolset,
            loop,
            self._bridge(session.id),
            self.fs_read,
            self.fs_write,
            gate=session.gate,
        )
        session.toolset = tools
        live = Live(session, tools, mcp_file=mcp_file)
        self.live[session.id] = live
        live.pump = loop.create_task(self._pump(session.id, live))
        return live

    async def _announce(self, sid: str, live: Live) -> None:
        commands = [
            AvailableCommand(
                name=c.name,
                description=c.description,
                input=AvailableCommandInput(UnstructuredCommandInput(hint=c.argument_hint or "")),
            )
            for c in commands_of(live.session)
        ]
        if commands:
            await self.client.session_update(
                session_id=sid, update=acp.helpers.update_available_commands(commands)
            )

    def _bridge(self, sid: str) -> Bridge:
        async def call(method: str, **fields: Any) -> str | None:
            if method == "read":
                r = await self.client.read_text_file(session_id=sid, **fields)
                return r.content
            await self.client.write_text_file(session_id=sid, **fields)
            return None

        return call

    async def _pump(self, sid: str, live: Live) -> None:
        async for e in live.session.events():
            for u in translate.updates(e):
                await self.client.session_update(session_id=sid, update=u)
            if isinstance(e, ev.ApprovalRequest):
                task = asyncio.get_running_loop().create_task(self._ask(sid, live, e))
                live.tasks.add(task)
                task.add_done_callback(live.tasks.discard)
            elif isinstance(e, ev.TurnComplete):
                if live.turn_done is not None and not live.turn_done.done():
                    live.turn_done.set_result(e)

    async def _ask(self, sid: str, live: Live, e: ev.ApprovalRequest) -> None:
        call = ToolCallUpdate(
            tool_call_id=e.call_id,
            title=translate.title_of(e.name, e.arguments),
            kind=translate.kind_of(e.name),
            status="pending",
            raw_input=e.arguments,
            content=[acp.tool_content(acp.text_block(e.preview.text))] if e.preview else None,
        )
        options = translate.permission_options(e.amendment)
        try:
            r = await self.client.request_permission(
                session_id=sid, tool_call=call, options=options
            )
            outcome = r.outcome
            choice = getattr(outcome, "option_id", None) if outcome.outcome == "selected" else None
        except Exception:  # the editor failed to answer: deny, never approve by accident
            choice = None
        # only an approval that was offered counts: a prefix never offered is no answer
        offered = {o.option_id for o in options}
        decision = choice if choice in translate.APPROVALS and choice in offered else "deny"
        note = "" if decision != "deny" else "the user declined in the editor"
        live.session.submit(ops.ApprovalDecision(e.call_id, decision, note))  # type: ignore[arg-type]
