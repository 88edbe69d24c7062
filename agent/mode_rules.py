"""What a permission mode says of a call (Claude Code's mode names).

The mode is the approval gate's (agent/approvals.py: ApprovalGate.set_mode), whoever sets it
(the CLI's --permission-mode, the TUI's shift+Tab), and so binds every call the gate judges, a
`task` child's included (it shares its parent's gate): plan mode denies every tool that
writes, runs commands or reaches an MCP server; acceptEdits allows file changes as an allow
rule would (a config deny or ask still wins: the gate takes the strongest of the two).
"""

from __future__ import annotations

from m3agent.tools.base import Capability

from .config import PermissionMode, Verdict

# Claude Code's permission modes; shift+Tab in the TUI cycles the first three.
MODES = tuple(m.value for m in PermissionMode)
PLAN_DENIES = frozenset({Capability.WRITE, Capability.EXEC, Capability.MCP})
# How a denial names a mode: the model (and the user) learn why, and how it ends.
MODE_SOURCES = {PermissionMode.PLAN: "plan mode (read only until the plan is approved)"}


def check_mode(mode: str) -> PermissionMode:
    """The mode named `mode`; a ValueError that lists the names otherwise."""
    try:
        return PermissionMode(mode)
    except ValueError:
        names = ", ".join(MODES)
        raise ValueError(f"unknown permission mode {mode!r} (use one of {names})") from None


def mode_verdict(
    mode: PermissionMode, capability: Capability, mutates: bool = False
) -> Verdict | None:
    """What a permission mode says of a call of `capability` (None: nothing); plan mode also
    denies any tool that declares it changes something, whatever its capability."""
    if mode is PermissionMode.PLAN and (capability in PLAN_DENIES or mutates):
        return Verdict.DENY
    if mode is PermissionMode.ACCEPT_EDITS and capability is Capability.WRITE:
        return Verdict.ALLOW
    return None


def denied_by(mode: PermissionMode) -> str:
    """How a denial names the mode that gave it."""
    return MODE_SOURCES.get(mode, f"{mode} mode")
