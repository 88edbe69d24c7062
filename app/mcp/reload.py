"""`/mcp reload`: the configuration's MCP servers into a running session, on the user's word.

The tools sit in the prompt's first block, so changing them makes the next request recompute
the whole prompt. `plan` says what would change and what that costs; `apply` (asked for
explicitly) starts the new set of servers, swaps the session's tools between turns, and stops
the old servers.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..settings import load_settings

if TYPE_CHECKING:
    from m3agent.agent.prompt_cache import CacheTracker
    from m3agent.tools.mcp.config import McpConfig
    from m3agent.tools.sandbox.runner import Sandbox
    from m3agent.tools.toolset import Toolset, ToolsetProtocol


class ToolsetHolder(Protocol):
    """What /mcp and /mcp reload read and change of a session (agent.session.Session): the
    tool set it holds, where its tools run (cwd, sandbox) and the prompt cache a swap spends."""

    toolset: ToolsetProtocol | None
    cwd: Path
    sandbox: Sandbox | None
    cache: CacheTracker

    @property
    def busy(self) -> bool: ...

    def replace_toolset(
        self, toolset: ToolsetProtocol, detail: dict[str, Any] | None = None
    ) -> ToolsetProtocol | None: ...


@dataclass(frozen=True, slots=True)
class ReloadPlan:
    added: tuple[str, ...]
    removed: tuple[str, ...]
    changed: tuple[str, ...]  # same name, different command/url/env
    skipped: tuple[str, ...]  # lines: untrusted project servers
    prompt_tokens: int | None  # the last request's prompt: what the next one recomputes
    config: McpConfig  # the one to apply

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def plan(session: ToolsetHolder) -> ReloadPlan:
    from m3agent.tools.mcp import mcp_hub

    config = load_settings().mcp_config(session.cwd)
    hub = mcp_hub(session.toolset)
    now = {c.cfg.name: c.cfg for c in hub.servers()} if hub is not None else {}
    new = {s.name: s for s in config.servers}
    # A server that announced a new tool list is restarted too, so its new tools come in.
    listed_anew = {s.name for s in hub.statuses() if s.tools_changed} if hub is not None else set()
    history = session.cache.history
    return ReloadPlan(
        added=tuple(n for n in new if n not in now),
        removed=tuple(n for n in now if n not in new),
        changed=tuple(
            n
            for n in new
            if n in now and (new[n].fingerprint() != now[n].fingerprint() or n in listed_anew)
        ),
        skipped=config.skipped,
        prompt_tokens=history[-1].prompt_tokens if history else None,
        config=config,
    )


def describe(p: ReloadPlan) -> str:
    if p.empty:
        rows = ["MCP servers: the configuration matches this session; nothing to reload."]
    else:
        parts = [
            f"{label} {', '.join(names)}"
            for label, names in (("add", p.added), ("remove", p.removed), ("restart", p.changed))
            if names
        ]
        cost = f"about {p.prompt_tokens} prompt tokens" if p.prompt_tokens else "the whole prompt"
        rows = [
            f"MCP reload would {'; '.join(parts)}.",
            "The tool list opens the prompt, so the next request recomputes it all "
            f"({cost}, nothing of it cached). Type /mcp reload yes to do it.",
        ]
    rows += [f"  {line}" for line in p.skipped]
    return "\n".join(rows)


def _start(session: ToolsetHolder, p: ReloadPlan) -> tuple[Toolset, dict[str, str]]:
    """In a worker thread: the base tools plus the planned servers' tools (started now)."""
    from m3agent.tools.mcp import mcp_hub, start_mcp
    from m3agent.tools.mcp.adapter import McpTool, ReadMcpResource
    from m3agent.tools.toolset import Toolset

    tools = session.toolset.tools() if session.toolset is not None else []
    base = Toolset([t for t in tools if not isinstance(t, McpTool | ReadMcpResource)])
    if not p.config.servers:
        return base, {}
    hub = mcp_hub(session.toolset)
    media = hub.media_dir if hub is not None else None
    started = start_mcp(
        base, p.config, sandbox=session.sandbox, workspace=session.cwd, media_dir=media
    )
    return started.toolset, started.errors


def _close(toolset: ToolsetProtocol | None) -> None:
    """Stops the servers of a tool set; the tools it shares with the other set (the shell
    and its background commands) carry on."""
    from m3agent.tools.mcp import mcp_hub

    hub = mcp_hub(toolset)
    if hub is not None:
        hub.close()


async def apply(session: ToolsetHolder, p: ReloadPlan) -> str:
    """Starts the planned servers, swaps the tools on the session's loop, stops the old ones."""
    if p.empty:
        return describe(p)
    new, errors = await asyncio.to_thread(_start, session, p)
    try:
        old = session.replace_toolset(
            new, {"added": list(p.added), "removed": list(p.removed), "restarted": list(p.changed)}
        )
    except RuntimeError:
        await asyncio.to_thread(_close, new)
        raise
    await asyncio.to_thread(_close, old)
    rows = [
        f"MCP servers reloaded: {len(new.names())} tools; the next request recomputes the prompt."
    ]
    rows += [f"  {why}" for why in errors.values()]
    return "\n".join(rows)


async def slash_mcp(session: ToolsetHolder | None, arg: str) -> str:
    """`/mcp` (report), `/mcp reload` (the plan), `/mcp reload yes` (do it). ValueError for
    a usage mistake or a busy session."""
    from .check import session_report

    if arg not in ("", "reload", "reload yes"):
        raise ValueError("usage: /mcp [reload [yes]]")
    if not arg:
        return await asyncio.to_thread(session_report, session.toolset if session else None)
    if session is None or session.busy:
        raise ValueError("/mcp reload: wait until the session is idle")
    p = await asyncio.to_thread(plan, session)
    if arg == "reload":
        return describe(p)
    try:
        return await apply(session, p)
    except RuntimeError as e:
        raise ValueError(f"/mcp reload: {e}") from None
