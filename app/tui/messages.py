"""Textual messages: how workers hand results to the screens (never by touching widgets).
Dataclasses (eq=False: a message is an event, not a value): Textual's Message runs its own setup
in __post_init__."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from m3agent.agent import events as ev
    from m3agent.tools.sandbox.policy import SandboxLayer

    from .ports import SessionLike


@dataclass(eq=False)
class SessionEvent(Message):
    """One event from Session.events()."""

    event: ev.Event


@dataclass(eq=False)
class SessionEvents(Message):
    """Several events that were ready at once (see event_batch), in order."""

    events: list[ev.Event] = field(default_factory=list)


@dataclass(eq=False)
class EngineProgress(Message):
    label: str
    fraction: float | None = None


@dataclass(eq=False)
class SessionReady(Message):
    session: SessionLike
    sandbox_layers: tuple[SandboxLayer, ...] | None = (
        None  # None: not probed, keep what config said
    )


@dataclass(eq=False)
class SessionFailed(Message):
    """The engine or session could not be started; `message` is one line naming the cause."""

    message: str
    kind: str = "startup"  # an ErrorView hint key: "engine_unavailable" | "startup"


@dataclass(eq=False)
class EventStreamEnded(Message):
    """Session.events() finished: the session has shut down."""

    session: SessionLike | None = None
