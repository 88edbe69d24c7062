"""Terminal notifications when an approval is needed or a long turn ends: the bell, OSC 9
(iTerm2, WezTerm, Windows Terminal) or OSC 777 (VTE terminals, foot, Ghostty), as Claude Code
and Codex offer. Config `notify`: auto (the bell, but nothing inside tmux, where a bell or
an OSC reaches the wrong pane unless asked for), bell, osc9, osc777 or off."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from m3agent.agent import events as ev

METHODS = ("auto", "off", "bell", "osc9", "osc777")
LONG_TURN_S = 10.0  # a turn shorter than this ends while the user still watches


def resolve(method: str, env: Mapping[str, str]) -> str:
    if method not in METHODS:
        raise ValueError(f"notify must be one of {', '.join(METHODS)}, got {method!r}")
    if method == "auto":
        return "off" if env.get("TMUX") else "bell"
    return method


def sequence(method: str, message: str) -> str:
    text = "".join(c for c in message if c.isprintable())  # nothing that ends the sequence
    if method == "bell":
        return "\a"
    if method == "osc9":
        return f"\x1b]9;{text}\x07"
    if method == "osc777":
        return f"\x1b]777;notify;m3agent;{text}\x07"
    return ""


def tty_writer(data: str) -> None:
    """To the controlling terminal directly: one short write between Textual's frames."""
    try:
        with open("/dev/tty", "w", encoding="utf-8") as tty:
            tty.write(data)
    except OSError:
        pass  # no terminal (tests, detached): nothing to notify


class Notifier:
    def __init__(
        self,
        method: str,
        write: Callable[[str], None] = tty_writer,
        clock: Callable[[], float] | None = None,
        long_turn_s: float = LONG_TURN_S,
    ) -> None:
        self.method = method
        self.write = write
        self.clock = clock
        self.long_turn_s = long_turn_s

    def see(self, e: ev.Event, turn_started_at: float | None) -> None:
        if self.method == "off":
            return
        if isinstance(e, ev.ApprovalRequest):
            self.write(sequence(self.method, f"m3agent: approve {e.name}?"))
        elif isinstance(e, ev.TurnComplete) and turn_started_at is not None and self.clock:
            took = self.clock() - turn_started_at
            if took >= self.long_turn_s:
                self.write(sequence(self.method, f"m3agent: turn {e.reason} after {took:.0f} s"))
