"""AgentConfig: the immutable knobs of a session (limits, thinking default, approvals).

Built once by app/settings.py from files, env and flags; validated here with ValueError so a bad
value is one clear line, whoever built it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from m3agent.engine.api import THINKING_MODES, SamplingParams, ThinkingMode


class ApprovalPolicy(StrEnum):
    """When to ask (agent/approvals.py says what each means)."""

    UNTRUSTED = "untrusted"
    ON_REQUEST = "on-request"
    NEVER = "never"


class PermissionMode(StrEnum):
    """Claude Code's permission modes (agent/approvals.py says what each means); the
    session's approval gate holds the one current mode (ApprovalGate.set_mode)."""

    DEFAULT = "default"
    ACCEPT_EDITS = "acceptEdits"
    PLAN = "plan"
    BYPASS_PERMISSIONS = "bypassPermissions"  # the front end also turns approvals off


class Verdict(StrEnum):
    """What a tool rule says, and what the approval gate decides for a call."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


APPROVAL_POLICIES: tuple[str, ...] = tuple(ApprovalPolicy)
RULE_ACTIONS: tuple[str, ...] = tuple(Verdict)

DEFAULT_SYSTEM_PROMPT = (
    "You are m3agent, a coding agent working in the user's repository. Use the tools to read, "
    "search, edit files and run commands. Make the smallest change that does the task, check it, "
    "then answer briefly."
)


@dataclass(frozen=True, slots=True)
class ToolRule:
    """A per-tool rule from config: `tool` is a tool name or "*"; deny wins over ask over allow."""

    tool: str
    action: str  # "allow" | "ask" | "deny"
    # Who set it, as a denial names it ("plan mode", "--disallowed-tools"); "" is the config.
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.action not in RULE_ACTIONS:
            raise ValueError(
                f"tool rule for {self.tool!r}: action {self.action!r} is not one of "
                f"{', '.join(RULE_ACTIONS)}"
            )
        if not self.tool:
            raise ValueError("tool rule: the tool name is empty")


@dataclass(frozen=True, slots=True)
class AgentConfig:
    # One "turn" is one user prompt; inside it the loop calls the engine up to `max_turns` times
    # (the CLI's --max-turns counts engine calls, like other agents' "steps").
    max_turns: int = 50
    max_tool_calls: int = 200
    max_wall_time_s: float = 3600.0
    thinking_default: ThinkingMode = ThinkingMode.ADAPTIVE
    approval_policy: ApprovalPolicy = ApprovalPolicy.ON_REQUEST
    rules: tuple[ToolRule, ...] = ()
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    tool_timeout_s: float = 120.0
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be at least 1, got {self.max_turns}")
        if self.max_tool_calls < 0:
            raise ValueError(f"max_tool_calls must be 0 or more, got {self.max_tool_calls}")
        if self.max_wall_time_s <= 0:
            raise ValueError(f"max_wall_time_s must be positive, got {self.max_wall_time_s}")
        if self.thinking_default not in THINKING_MODES:
            raise ValueError(
                f"thinking mode {self.thinking_default!r} is not one of {', '.join(THINKING_MODES)}"
            )
        # A string from settings or a flag becomes the member (equal to it, typed).
        object.__setattr__(self, "thinking_default", ThinkingMode(self.thinking_default))
        if self.approval_policy not in APPROVAL_POLICIES:
            raise ValueError(
                f"approval policy {self.approval_policy!r} is not one of "
                f"{', '.join(APPROVAL_POLICIES)}"
            )
        object.__setattr__(self, "approval_policy", ApprovalPolicy(self.approval_policy))
        if self.tool_timeout_s <= 0:
            raise ValueError(f"tool_timeout_s must be positive, got {self.tool_timeout_s}")
