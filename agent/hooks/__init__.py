"""Hooks in Claude Code's shape: the user's own programs, run on session events (config.py
says which, runner.py how, dispatch.py what their answers do). docs/hooks.md."""

from .config import HookCommand, HookEvent, HookMatcher, HookSet, parse_hooks
from .dispatch import Hooks, HookVerdict

__all__ = [
    "HookCommand",
    "HookEvent",
    "HookMatcher",
    "HookSet",
    "Hooks",
    "HookVerdict",
    "parse_hooks",
]
