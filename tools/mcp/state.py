"""What a server connection reports: its state, a status row, and the one error type."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ServerState(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"


class McpCallError(Exception):
    """A call that produced no result; the message is one line for the model and the user."""


@dataclass(frozen=True, slots=True)
class ServerStatus:
    name: str
    state: ServerState
    detail: str  # the error, or the protocol version and server name
    tools: tuple[str, ...]
    tools_changed: bool  # the server said its tool list changed since the session started
    restarts: int


def one_line(e: BaseException) -> str:
    if isinstance(e, BaseExceptionGroup):
        return "; ".join(one_line(x) for x in e.exceptions[:3])
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, FileNotFoundError | PermissionError):
        return f"cannot start it: {text}"
    return text
