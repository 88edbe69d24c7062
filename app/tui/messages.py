"""Textual messages: how workers hand results to the screens (never by touching widgets)."""

from __future__ import annotations

from typing import Any

from textual.message import Message


class SessionEvent(Message):
    """One event from Session.events(), posted by the pump worker."""

    def __init__(self, event: Any) -> None:
        super().__init__()
        self.event = event


class SessionEvents(Message):
    """Several events that were ready at once (see event_batch), in order."""

    def __init__(self, events: list[Any]) -> None:
        super().__init__()
        self.events = events


class EngineProgress(Message):
    def __init__(self, label: str, fraction: float | None) -> None:
        super().__init__()
        self.label = label
        self.fraction = fraction


class SessionReady(Message):
    def __init__(self, session: Any, sandbox_layers: tuple[str, ...] | None = None) -> None:
        super().__init__()
        self.session = session
        self.sandbox_layers = sandbox_layers  # None: not probed, keep what the config said


class SessionFailed(Message):
    """The engine or session could not be started; `message` is one line naming the cause."""

    def __init__(self, message: str, kind: str = "startup") -> None:
        super().__init__()
        self.message = message
        self.kind = kind  # an ErrorView hint key: "engine_unavailable" | "startup"


class PromptSubmitted(Message):
    """The user pressed Enter in the prompt."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class EventStreamEnded(Message):
    """Session.events() finished: the session has shut down."""

    def __init__(self, session: Any = None) -> None:
        super().__init__()
        self.session = session
