"""Approvals: policy (untrusted / on-request / never) x tool rules x sandbox -> allow/ask/deny.

Codex's meaning of the policies:
- untrusted:  ask before every tool that mutates (writes files, runs commands);
- on-request: run inside the sandbox without asking; ask when the sandbox would block the call
              (judged from the paths the tool declares it touches: Tool.touches, through
              tools/sandbox/precheck.py) or the tool declares itself risky;
- never:      never ask; what the sandbox blocks fails and the model sees the failure.
Per-tool rules from config override the policy; which rules cover a call, and which wins, is
agent/approval_rules.py's. The permission mode (agent/mode_rules.py) is the gate's too, and
weighs as a rule would. This module holds the order in which the gate asks them (ApprovalGate:
`_judge`), and what it remembers: "approve for this session" answers, saved rules, the mode.
"Always allow" answers are handed to `persist` (the app stores them as allow rules for later
sessions).
Shell calls are also judged by their command's prefix (agent/shell_prefixes.py): where the
gate would ask, an allowed prefix (saved, or accepted this session) answers instead, for
every front end alike; where it still asks, the check carries the prefix the user may accept
(`amendment`), so a front end only shows the question and returns the answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.tools.base import Capability, Touches
from m3agent.tools.sandbox.policy import SandboxMode
from m3agent.tools.sandbox.precheck import blocks

from . import approval_rules
from .approval_rules import call_server, rule_verdict, strongest
from .config import ApprovalPolicy, PermissionMode, ToolRule, Verdict
from .mode_rules import check_mode, denied_by, mode_verdict
from .path_rules import parse_rule
from .shell_prefixes import Prefix, ShellPrefixes, amendment_for, describe

if TYPE_CHECKING:
    from m3agent.tools.sandbox.runner import Sandbox


@dataclass(frozen=True, slots=True)
class ApprovalCheck:
    verdict: Verdict
    reason: str
    # ASK: the command prefix the user may allow from now on (shell), offered by the front end
    amendment: Prefix | None = None
    # ALLOW: the allowed command prefix that answered instead of asking
    prefix: Prefix | None = None


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
        prefixes: ShellPrefixes | None = None,  # allowed shell prefixes (saved ones, persist)
    ):
        self.policy = ApprovalPolicy(policy)
        self.persist = persist
        self.workspace = Path(workspace) if workspace is not None else None
        self._confine = confine
        self._saved: tuple[ToolRule, ...] = ()  # saved rules (user, trusted project): set_saved
        self.rules = rules  # parsed now: a bad rule is a ValueError naming it
        self._session_allowed: set[str] = set()
        self._mode = PermissionMode.DEFAULT
        self.prefixes = prefixes if prefixes is not None else ShellPrefixes()

    @property
    def mode(self) -> PermissionMode:
        """The permission mode, the session's whoever set it (set_mode)."""
        return self._mode

    def set_mode(self, mode: str) -> PermissionMode:
        """The one way a permission mode changes (the CLI's --permission-mode, the TUI's
        shift+Tab, an editor's session/set_mode): every call the gate judges from now on,
        a task child's included, and whatever reads the mode (hooks, an editor's tools)."""
        self._mode = check_mode(mode)
        return self._mode

    @property
    def rules(self) -> tuple[ToolRule, ...]:
        """The config's rules (and flags'), then the saved ones it does not already hold."""
        return tuple(r for r, _ in self._rules)

    @rules.setter
    def rules(self, rules: tuple[ToolRule, ...]) -> None:
        self._config = tuple(rules)
        self._parse()

    def set_saved(self, rules: tuple[ToolRule, ...]) -> None:
        """The saved rules (`/permissions allow RULE`, a trusted project's settings.json),
        after the config's (a config deny still wins); replaced whole when they change."""
        self._saved = tuple(rules)
        self._parse()

    def _parse(self) -> None:
        # A front end that already folded the saved rules into the config's (`m3agent run`)
        # gets each once.
        rules = (*self._config, *(r for r in self._saved if r not in self._config))
        self._rules = tuple((r, parse_rule(r.tool, check=self._confine)) for r in rules)

    def hides(self, path: str) -> bool:
        """Whether a deny or ask rule about reading covers `path` (absolute, or relative to
        the workspace): a search over a directory above it leaves it out."""
        return approval_rules.hides(self._rules, path, self.workspace, self._confine)

    @property
    def session_allowed(self) -> tuple[str, ...]:
        """The tools an "approve for this session" answer allowed (/permissions shows them)."""
        return tuple(sorted(self._session_allowed))

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

    def allow_prefix(self, prefix: Prefix, *, save: bool = False) -> str | None:
        """An accepted amendment: shell commands with this prefix run unasked from now on
        (and, with `save`, in later sessions). Returns why saving failed, else None."""
        return self.prefixes.allow(prefix, save=save)

    def amendment(self, tool_name: str, arguments: dict[str, Any] | None) -> Prefix | None:
        """The prefix a question about this call may offer (shell), or None."""
        return amendment_for(tool_name, arguments)

    def check(
        self,
        tool_name: str,
        touches: Touches | None = None,
        *,
        mutates: bool,
        risky: bool = False,
        sandbox: Sandbox | None = None,
        capability: Capability = Capability.OTHER,
        arguments: dict[str, Any] | None = None,
    ) -> ApprovalCheck:
        """`touches`: what the call declares (Toolset.touches; None when it declared
        nothing); `capability`: what the tool does (Tool.capability); `arguments`: the call's
        (a shell command is judged by its prefix where the gate would ask)."""
        found = self._judge(tool_name, touches, mutates, risky, sandbox, capability)
        if found.verdict is not Verdict.ASK:
            return found  # a deny stays a deny: an allowed prefix only answers a question
        prefix = self.prefixes.covering(tool_name, arguments)
        if prefix is not None:
            return ApprovalCheck(Verdict.ALLOW, f"allowed: {describe(prefix)}", prefix=prefix)
        return replace(found, amendment=amendment_for(tool_name, arguments))

    def _judge(
        self,
        tool_name: str,
        touches: Touches | None,
        mutates: bool,
        risky: bool,
        sandbox: Sandbox | None,
        capability: Capability,
    ) -> ApprovalCheck:
        """Rules, mode, session answers and policy, before any command prefix."""
        server = call_server(tool_name, touches, capability)
        found = rule_verdict(tool_name, self._rules, touches, self.workspace, self._confine, server)
        config = found[0] if found is not None else None
        by_mode = mode_verdict(self._mode, capability, mutates)
        rule = strongest([v for v in (config, by_mode) if v is not None])
        if rule is Verdict.DENY:
            if found is None or config is not Verdict.DENY:
                who = denied_by(self._mode)
                return ApprovalCheck(Verdict.DENY, f"{who} denies the tool {tool_name}")
            who = found[1].source or "the config"
            return ApprovalCheck(Verdict.DENY, f"{who} denies the tool {tool_name}")
        if rule is Verdict.ALLOW:
            if config is None:
                return ApprovalCheck(Verdict.ALLOW, f"allowed in {self._mode} mode")
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
