"""Ops: what a front end submits to a Session (Codex-style submission queue)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from m3agent.engine.api import MediaPart, ThinkingMode


@dataclass(frozen=True, slots=True)
class UserTurn:
    text: str
    media: tuple[MediaPart, ...] = ()
    thinking_mode: ThinkingMode | None = None  # None: the session's current default
    # Tools run without an approval prompt during this turn (a custom command's allowed-tools).
    allowed_tools: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Stop the running generation or tool; the turn ends with reason "interrupted"."""


class Decision(StrEnum):
    """The answers to an approval request (the one definition; front ends pass these or
    their string values)."""

    APPROVE = "approve"  # this call
    APPROVE_SESSION = "approve_session"  # this tool, for the rest of the session
    APPROVE_ALWAYS = "approve_always"  # this tool, in later sessions too (persisted)
    # The request's amendment (shell: its command prefix), accepted: for the rest of the
    # session, or saved for later sessions too. Without an amendment: this call only.
    APPROVE_PREFIX = "approve_prefix"
    APPROVE_PREFIX_ALWAYS = "approve_prefix_always"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    call_id: str
    decision: Decision
    note: str = ""  # for deny: told to the model

    def __post_init__(self) -> None:
        # A string is accepted and checked here: a misspelt answer must fail where it is
        # made, never read as an approval further on.
        object.__setattr__(self, "decision", Decision(self.decision))


@dataclass(frozen=True, slots=True)
class SetThinking:
    """The thinking mode of later turns: applied through each turn's generation prefix, so the
    cached prompt stays valid. With `session_default`, the mode is also written into the
    prompt's system block: the whole prompt is recomputed once, and a ContextEvent
    ("thinking_default", with `recompute_tokens`) says how much before it happens."""

    mode: ThinkingMode
    session_default: bool = False


@dataclass(frozen=True, slots=True)
class Compact:
    """Summarise the conversation tail, keeping the system prompt and snapshot; with
    `refresh_snapshot`, also replace the snapshot with a fresh one (a reported event)."""

    refresh_snapshot: bool = False


@dataclass(frozen=True, slots=True)
class Shutdown:
    pass


Op = UserTurn | Interrupt | ApprovalDecision | SetThinking | Compact | Shutdown
