"""Approvals: policy (untrusted / on-request / never) x tool rules x sandbox -> allow/ask/deny.

Codex's meaning of the policies:
- untrusted:  ask before every tool that mutates (writes files, runs commands);
- on-request: run inside the sandbox without asking; ask when the sandbox would block the call
              or the tool declares itself risky;
- never:      never ask; what the sandbox blocks fails and the model sees the failure.
Per-tool rules from config override the policy; when several rules match, deny wins, then ask.
A rule names a tool, "*", a glob ("mcp__github__*"), or an MCP server as `mcp__SERVER` (all of
its tools, Claude Code's convention). "Always allow" answers are handed to `persist` (the app
stores them as allow rules for later sessions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from m3agent.agent.config import ToolRule

Verdict = Literal["allow", "ask", "deny"]
_STRENGTH = {"allow": 0, "ask": 1, "deny": 2}


@dataclass(frozen=True, slots=True)
class ApprovalCheck:
    verdict: Verdict
    reason: str


def rule_matches(rule: str, tool_name: str) -> bool:
    if rule in (tool_name, "*"):
        return True
    if rule.startswith("mcp__") and rule.count("__") == 1:  # a whole MCP server
        return tool_name.startswith(rule + "__")
    return any(c in rule for c in "*?[") and fnmatchcase(tool_name, rule)


def _rule_verdict(tool_name: str, rules: tuple[ToolRule, ...]) -> Verdict | None:
    matching = [r.action for r in rules if rule_matches(r.tool, tool_name)]
    if not matching:
        return None
    return max(matching, key=lambda a: _STRENGTH[a])  # type: ignore[return-value]


def _sandbox_would_block(sandbox: Any, tool_name: str, arguments: dict[str, Any], mutates: bool):
    """Asks the sandbox policy when it can answer; otherwise infers from its mode name."""
    if sandbox is None:
        return False
    probe = getattr(sandbox, "would_block", None)
    if callable(probe):
        try:
            return bool(probe(tool_name, arguments))
        except Exception:  # a probe failure must not stop the turn; asking is the safe side
            return True
    policy = getattr(sandbox, "policy", sandbox)  # a Sandbox runner or a bare policy
    mode = getattr(policy, "mode", None)
    mode = getattr(mode, "value", mode)
    return bool(mutates and mode == "read-only")


class ApprovalGate:
    """Decides per call; remembers "approve for this session" answers."""

    def __init__(self, policy: str, rules: tuple[ToolRule, ...] = (),
                 persist: Callable[[str], None] | None = None):
        self.policy = policy
        self.rules = rules
        self.persist = persist
        self._session_allowed: set[str] = set()

    def allow_for_session(self, tool_name: str) -> None:
        self._session_allowed.add(tool_name)

    def allow_always(self, tool_name: str) -> None:
        """For this session, and (when the app gave a store) for later ones too."""
        self._session_allowed.add(tool_name)
        if self.persist is not None:
            try:
                self.persist(tool_name)
            except (OSError, ValueError):  # the answer still holds for this session
                pass

    def check(
        self,
        tool_name: str,
        arguments: dict[str, Any],
        *,
        mutates: bool,
        risky: bool = False,
        sandbox: Any = None,
    ) -> ApprovalCheck:
        rule = _rule_verdict(tool_name, self.rules)
        if rule == "deny":
            return ApprovalCheck("deny", f"the config denies the tool {tool_name}")
        if rule == "allow":
            return ApprovalCheck("allow", "allowed by a config rule")
        if rule == "ask":
            if tool_name in self._session_allowed:
                return ApprovalCheck("allow", "approved for this session")
            return ApprovalCheck("ask", f"the config asks before {tool_name}")
        if tool_name in self._session_allowed:
            return ApprovalCheck("allow", "approved for this session")
        if self.policy == "never":
            return ApprovalCheck("allow", "approval policy is never")
        if self.policy == "untrusted":
            if mutates:
                return ApprovalCheck("ask", f"{tool_name} changes the workspace")
            return ApprovalCheck("allow", "read-only tool")
        # on-request
        if _sandbox_would_block(sandbox, tool_name, arguments, mutates):
            return ApprovalCheck("ask", f"the sandbox would block {tool_name}")
        if risky:
            return ApprovalCheck("ask", f"{tool_name} is marked risky")
        return ApprovalCheck("allow", "runs inside the sandbox")
