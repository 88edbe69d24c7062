"""`/mcp reload`: the configuration's MCP servers into a running session, on the user's word.

The tools sit in the prompt's first block, so changing them makes the next request recompute
the whole prompt. `plan` says what would change and what that costs; `apply` (asked for
explicitly) starts the new set of servers, swaps the session's tools between turns, and stops
the old servers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from m3agent.tools.mcp.config import McpConfig, McpServerConfig
    from m3agent.tools.toolset import ToolsetProtocol


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


def _current(session: Any) -> dict[str, McpServerConfig]:
    hub = getattr(session.toolset, "hub", None)
    return {c.cfg.name: c.cfg for c in hub.servers()} if hub is not None else {}


def plan(session: Any) -> ReloadPlan:
    from ..settings import load_settings

    config = load_settings().mcp_config(session.cwd)
    now, new = _current(session), {s.name: s for s in config.servers}
    hub = getattr(session.toolset, "hub", None)
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


def _start(session: Any, p: ReloadPlan) -> tuple[Any, dict[str, str]]:
    """In a worker thread: the base tools plus the planned servers' tools (started now)."""
    from m3agent.tools.mcp import start_mcp
    from m3agent.tools.mcp.adapter import McpTool, ReadMcpResource
    from m3agent.tools.toolset import Toolset

    base = Toolset(
        [t for t in session.toolset.tools() if not isinstance(t, McpTool | ReadMcpResource)]
    )
    if not p.config.servers:
        return base, {}
    media = getattr(getattr(session.toolset, "hub", None), "media_dir", None)
    started = start_mcp(
        base, p.config, sandbox=session.sandbox, workspace=session.cwd, media_dir=media
    )
    return started.toolset, started.errors


def _close(toolset: ToolsetProtocol | None) -> None:
    close = getattr(toolset, "close", None)
    if close is not None:
        close()


async def apply(session: Any, p: ReloadPlan) -> str:
    """Starts the planned servers, swaps the tools on the session's loop, stops the old ones."""
    import asyncio

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


async def slash_mcp(session: Any, arg: str) -> str:
    """`/mcp` (report), `/mcp reload` (the plan), `/mcp reload yes` (do it). ValueError for
    a usage mistake or a busy session."""
    import asyncio

    from .check import session_report

    if arg not in ("", "reload", "reload yes"):
        raise ValueError("usage: /mcp [reload [yes]]")
    if not arg:
        return await asyncio.to_thread(session_report, getattr(session, "toolset", None))
    if session is None or getattr(session, "busy", False):
        raise ValueError("/mcp reload: wait until the session is idle")
    p = await asyncio.to_thread(plan, session)
    if arg == "reload":
        return describe(p)
    try:
        return await apply(session, p)
    except RuntimeError as e:
        raise ValueError(f"/mcp reload: {e}") from None
