"""MCP prompts as `/mcp__SERVER__PROMPT args` commands (Claude Code's naming).

Listed once when the session starts (the `/` menu, ACP's available commands); rendered by
the server when used: the words after the name fill the prompt's arguments in order (the last
takes the rest), and the messages it returns become the user's prompt.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..custom_commands import CustomCommand

if TYPE_CHECKING:
    from m3agent.tools.mcp.hub import McpHub
    from m3agent.tools.toolset import ToolsetProtocol
    from mcp_types import GetPromptResult

_TIMEOUT_S = 15.0


def _text(result: GetPromptResult) -> str:
    parts = []
    for m in getattr(result, "messages", ()):
        content = getattr(m, "content", None)
        text = getattr(content, "text", None)
        if isinstance(text, str):
            parts.append(text)
    return "\n\n".join(parts)


def _renderer(hub: McpHub, server: str, prompt: str, names: list[str]) -> Callable[[str], str]:
    def render(arguments: str) -> str:
        try:
            words = shlex.split(arguments)
        except ValueError:
            words = arguments.split()
        values: dict[str, str] = {}
        for i, name in enumerate(names):
            if i < len(words):
                values[name] = " ".join(words[i:]) if i == len(names) - 1 else words[i]
        return _text(hub.get_prompt(server, prompt, values, timeout_s=_TIMEOUT_S))

    return render


def prompt_commands(toolset: ToolsetProtocol) -> tuple[CustomCommand, ...]:
    from m3agent.tools.mcp import mcp_hub

    hub = mcp_hub(toolset)
    if hub is None:
        return ()
    out: list[CustomCommand] = []
    for conn in hub.servers():
        server = conn.cfg.name
        if str(conn.state) != "ready":  # never (re)start a failed server just to ask
            continue
        try:
            prompts = hub.list_prompts(server, timeout_s=_TIMEOUT_S)
        except Exception:  # no prompts capability, or a failed server: it has no commands
            continue
        for p in prompts:
            names = [a.name for a in (p.arguments or [])]
            out.append(
                CustomCommand(
                    name=f"mcp__{server}__{p.name}",
                    description=p.description or f"prompt of MCP server {server}",
                    body="",
                    argument_hint=" ".join(names),
                    source=f"mcp:{server}",
                    render=_renderer(hub, server, p.name, names),
                )
            )
    return tuple(out)
