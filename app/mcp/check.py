"""`m3agent doctor`'s MCP part: start each configured server the way a session would
(under the sandbox policy), list its tools, stop it, and say what happened."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from m3agent.tools.sandbox.runner import Sandbox

if TYPE_CHECKING:
    from m3agent.tools.sandbox.policy import SandboxPolicy
    from m3agent.tools.toolset import ToolsetProtocol

    from ..settings import Settings


def check_servers(settings: Settings, policy: SandboxPolicy) -> list[dict[str, Any]]:
    from m3agent.tools.mcp import McpConfig, McpHub

    try:
        config = settings.mcp_config(policy.workspace)
    except ValueError as e:
        return [{"name": "-", "state": "error", "detail": str(e), "tools": []}]
    rows = [
        {"name": "-", "state": "skipped", "detail": line, "tools": []} for line in config.skipped
    ]
    if not config.servers:
        return rows
    hub = McpHub(
        McpConfig(config.servers, oauth_dir=config.oauth_dir),
        sandbox=Sandbox(policy),
        workspace=policy.workspace,
    )
    try:
        errors = hub.start_all()
        for status in hub.statuses():
            rows.append(
                {
                    "name": status.name,
                    "state": "failed" if status.name in errors else status.state.value,
                    "detail": errors.get(status.name) or status.detail,
                    "tools": list(status.tools),
                }
            )
    finally:
        hub.close()
    return rows


def format_rows(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "  mcp        no servers configured"
    out = []
    for r in rows:
        if r["name"] == "-":
            out.append(f"  mcp        {r['detail']}")
        elif r["state"] == "ready":
            out.append(f"  mcp        {r['name']}: ok, {len(r['tools'])} tools ({r['detail']})")
        else:
            out.append(f"  mcp        {r['name']}: {r['state']}: {r['detail']}")
    return "\n".join(out)


def session_report(toolset: ToolsetProtocol | None) -> str:
    """What `/mcp` shows: each server of the running session, its state and tools."""
    from m3agent.tools.mcp import mcp_hub

    hub = mcp_hub(toolset)
    head = (
        "MCP servers of this session. Its tool set was fixed when it started (the tools "
        "open the prompt): servers added to the configuration since, or new tools a server "
        "announced, come in with /mcp reload (it says what it would recompute and asks "
        "first) or with the next session."
    )
    if hub is None or not hub.statuses():
        return head + "\n  (none; add one with `m3agent mcp add`)"
    rows = [head]
    for s in hub.statuses():
        state = s.state.value
        if s.state.value == "failed":
            state += f": {s.detail} (restarted on the next call)"
        elif s.detail:
            state += f" ({s.detail})"
        rows.append(f"  {s.name}  {state}")
        rows.append(f"    tools: {', '.join(s.tools) or '(none)'}")
        if s.tools_changed:
            rows.append(
                "    the server's tool list changed; /mcp reload takes the new list "
                "(the whole prompt is then recomputed), else the next session does"
            )
        if s.restarts:
            rows.append(f"    restarted {s.restarts} time(s)")
    return "\n".join(rows)
