"""Slash commands typed in the prompt: parsed here, executed by the main screen."""

from __future__ import annotations

from dataclasses import dataclass

from m3agent.engine.api import THINKING_MODES

HELP = {
    "/think enabled|disabled|adaptive": "thinking mode of the next turns (ctrl+t cycles it)",
    "/think default MODE": "also the session's mode in the prompt (recomputes it once)",
    "/attach PATH": "attach an image or video to the next prompt (or write @path.png)",
    "/undo": "restore the files as they were before the last edit",
    "/diff": "show the uncommitted changes in the workspace (git diff)",
    "/compact": "summarise the conversation to free context",
    "/sessions": "browse saved sessions and resume one",
    "/context": "what the repository snapshot holds, with token counts",
    "/help": "this list",
    "/quit": "leave (also ctrl+q)",
}
NAMES = ("think", "attach", "undo", "diff", "compact", "sessions", "context", "help", "quit")


@dataclass(frozen=True, slots=True)
class SlashCommand:
    name: str
    arg: str = ""


class SlashError(ValueError):
    """A malformed slash command; the message is shown to the user as is."""


def parse_slash(text: str) -> SlashCommand | None:
    """None when the text is an ordinary prompt; raises SlashError on a bad command."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    head, _, arg = stripped[1:].partition(" ")
    name = head.lower()
    if name not in NAMES:
        raise SlashError(f"unknown command /{head}; type /help for the list")
    arg = arg.strip()
    if name == "think":
        if arg.removeprefix("default ").strip() not in THINKING_MODES:
            raise SlashError("usage: /think enabled|disabled|adaptive")
    if name == "attach" and not arg:
        raise SlashError("usage: /attach PATH")
    return SlashCommand(name, arg)


def next_thinking(mode: str) -> str:
    """ctrl+t order: adaptive -> enabled -> disabled -> adaptive."""
    order = ("adaptive", "enabled", "disabled")
    return order[(order.index(mode) + 1) % len(order)] if mode in order else "adaptive"
