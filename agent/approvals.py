"""Approvals: policy (untrusted / on-request / never) x tool rules x sandbox -> allow/ask/deny.

Codex's meaning of the policies:
- untrusted:  ask before every tool that mutates (writes files, runs commands);
- on-request: run inside the sandbox without asking; ask when the sandbox would block the call
              (judged from the paths the tool declares it touches: Tool.touches, through
              tools/sandbox/precheck.py) or the tool declares itself risky;
- never:      never ask; what the sandbox blocks fails and the model sees the failure.
Per-tool rules from config override the policy; when several rules match, deny wins, then ask.
A rule names a tool, "*", a glob ("mcp__github__*"), or an MCP server as `mcp__SERVER` (all of
its tools, Claude Code's convention), optionally with a path pattern: `edit_file(src/**)`,
Claude Code's `Edit(src/**)` (agent/path_rules.py: workspace-relative only, symlinks resolved).
"Always allow" answers are handed to `persist` (the app stores them as allow rules for later
sessions).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from m3agent.tools.base import Touches
from m3agent.tools.sandbox.policy import SandboxMode
from m3agent.tools.sandbox.precheck import blocks

from .config import ApprovalPolicy, ToolRule, Verdict
from .path_rules import PathRule, parse_rule, rule_covers

if TYPE_CHECKING:
    from m3agent.tools.sandbox.runner import Sandbox


_STRENGTH = {Verdict.ALLOW: 0, Verdict.ASK: 1, Verdict.DENY: 2}


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


def _rule_verdict(
    tool_name: str,
    rules: tuple[tuple[ToolRule, PathRule], ...],
    touches: Touches | None,
    workspace: Path | None,
    confine: bool = True,
) -> tuple[Verdict, ToolRule] | None:
    """The strongest verdict of the rules that cover this call, with the rule that gave it."""
    paths = None if touches is None or touches.opaque else (*touches.reads, *touches.writes)
    matching = []
    for rule, parsed in rules:
        if not any(rule_matches(t, tool_name) for t in parsed.tools):
            continue
        verdict = Verdict(rule.action)
        allow = verdict is Verdict.ALLOW
        if rule_covers(parsed, paths, workspace, allow=allow, confine=confine):
            matching.append((verdict, rule))
    if not matching:
        return None
    return max(matching, key=lambda m: _STRENGTH[m[0]])


def _sandbox_would_block(sandbox: Sandbox | None, touches: Touches | None, mutates: bool) -> bool:
    """From the paths the call declares (touches); a call that declared nothing (its
    arguments did not parse) is judged by the mode alone: no change in a read-only sandbox."""
    if sandbox is None:
        return False
    if touches is None:
        return mutates and sandbox.policy.mode is SandboxMode.READ_ONLY
    try:
        return blocks(sandbox, touches)
    except Exception:  # a precheck failure must not stop the turn; asking is the safe side
        return True


class ApprovalGate:
    """Decides per call; remembers "approve for this session" answers."""

    def __init__(
        self,
        policy: str,
        rules: tuple[ToolRule, ...] = (),
        persist: Callable[[str], None] | None = None,
        workspace: Path | None = None,
        *,
        confine: bool = True,  # False: path rules unchecked (tests of what the checks stop)
    ):
        self.policy = ApprovalPolicy(policy)
        self.persist = persist
        self.workspace = Path(workspace) if workspace is not None else None
        self._confine = confine
        self.rules = rules  # parsed now: a bad rule is a ValueError naming it
        self._session_allowed: set[str] = set()

    @property
    def rules(self) -> tuple[ToolRule, ...]:
        return tuple(r for r, _ in self._rules)

    @rules.setter
    def rules(self, rules: tuple[ToolRule, ...]) -> None:
        self._rules = tuple((r, parse_rule(r.tool, check=self._confine)) for r in rules)

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
        touches: Touches | None = None,
        *,
        mutates: bool,
        risky: bool = False,
        sandbox: Sandbox | None = None,
    ) -> ApprovalCheck:
        """`touches`: what the call declares (Toolset.touches; None when it declared
        nothing)."""
        found = _rule_verdict(tool_name, self._rules, touches, self.workspace, self._confine)
        rule = found[0] if found is not None else None
        if found is not None and rule is Verdict.DENY:
            who = found[1].source or "the config"
            return ApprovalCheck(Verdict.DENY, f"{who} denies the tool {tool_name}")
        if rule is Verdict.ALLOW:
            return ApprovalCheck(Verdict.ALLOW, "allowed by a config rule")
        if rule is Verdict.ASK:
            if tool_name in self._session_allowed:
                return ApprovalCheck(Verdict.ALLOW, "approved for this session")
            return ApprovalCheck(Verdict.ASK, f"the config asks before {tool_name}")
        if tool_name in self._session_allowed:
            return ApprovalCheck(Verdict.ALLOW, "approved for this session")
        if self.policy is ApprovalPolicy.NEVER:
            return ApprovalCheck(Verdict.ALLOW, "approval policy is never")
        if self.policy is ApprovalPolicy.UNTRUSTED:
            if mutates:
                return ApprovalCheck(Verdict.ASK, f"{tool_name} changes the workspace")
            return ApprovalCheck(Verdict.ALLOW, "read-only tool")
        # on-request
        if _sandbox_would_block(sandbox, touches, mutates):
            return ApprovalCheck(Verdict.ASK, f"the sandbox would block {tool_name}")
        if risky:
            return ApprovalCheck(Verdict.ASK, f"{tool_name} is marked risky")
        return ApprovalCheck(Verdict.ALLOW, "runs inside the sandbox")
