"""Ops: what a front end submits to a Session (Codex-style submission queue)."""

from __future__ import annotations

from dataclasses import dataclass

from m3agent.engine.api import MediaPart, ThinkingMode


@dataclass(frozen=True, slots=True)
class UserTurn:
    text: str
    media: tuple[MediaPart, ...] = ()
    thinking_mode: ThinkingMode | None = None  # None: the session's current default


@dataclass(frozen=True, slots=True)
class Interrupt:
    """Stop the running generation or tool; the turn ends with reason "interrupted"."""


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    call_id: str
    decision: str  # "approve" | "approve_session" | "approve_always" (persisted) | "deny"
    note: str = ""  # for deny: told to the model


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
