"""Would a tool call be refused by the path guard? Answered without running it, from what the
tool itself declares it touches (Tool.touches): no table here repeats which tool reads or
writes what, so a new tool (an MCP tool, a plugin) is judged by its own declaration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from m3agent.tools.base import ToolContext, Touches

if TYPE_CHECKING:  # types only: the runner loads when a Sandbox is built
    from m3agent.tools.sandbox.runner import Sandbox


def blocks(sandbox: Sandbox, touches: Touches) -> bool:
    """Whether the path guard would refuse one of the paths a call names (a read of a secret
    location, a write outside the writable roots, into a protected name, or any write in a
    read-only sandbox). An opaque tool's other reach is left to the layers at run time."""
    from m3agent.tools.paths import PathDenied, check_read, check_write

    ctx = ToolContext(cwd=sandbox.policy.workspace, sandbox=sandbox)
    try:
        for raw in touches.reads:
            check_read(raw, ctx)
        for raw in touches.writes:
            check_write(raw, ctx)
    except PathDenied:
        return True
    return False
