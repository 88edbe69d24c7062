"""The shell command prefixes a session allows ("always allow commands starting with
`git status`"), held by the approval gate (agent/approvals.py) so every front end gets the
same answer for the same command: the TUI, a headless run and an editor over ACP.

Which commands a prefix covers is agent/command_prefix.py's (and the per-program rules of
agent/command_rules.py): a prefix covers a command only when that command's own prefix is
the same, so a wrapper or an option that runs another program is asked about again.

The gate offers a prefix as an *amendment* when it asks about a shell call (Codex's exec
policy amendment); the front end only shows it and says whether the user accepted it, for
this session or saved (`persist`: the app's store, app/permission_store.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from m3agent.tools.shell import Shell

from .command_prefix import command_prefix, matches, shown

SHELL_TOOL = Shell.name  # the one tool whose calls are judged by their command's prefix
Prefix = tuple[str, ...]


def _command(tool_name: str, arguments: Mapping[str, Any] | None) -> str | None:
    if tool_name != SHELL_TOOL or arguments is None:
        return None
    command = arguments.get("command")
    return command if isinstance(command, str) else None


def amendment_for(tool_name: str, arguments: Mapping[str, Any] | None) -> Prefix | None:
    """The prefix a user may allow from now on for this call (shell only), or None: then
    only "once" (shell syntax, a program that runs others, another tool)."""
    command = _command(tool_name, arguments)
    return None if command is None else command_prefix(command)


def describe(prefix: Prefix) -> str:
    """How a prefix is named to the user: `git status …` (quoted as the shell would)."""
    return f"{shown(prefix)} …"


class ShellPrefixes:
    """The allowed prefixes: saved ones (given at start or added on trust) and answers of
    this session; `persist` keeps a saved answer for later sessions."""

    def __init__(
        self, saved: Iterable[Prefix] = (), persist: Callable[[Prefix], None] | None = None
    ) -> None:
        self._allowed: list[Prefix] = []
        self.persist = persist
        self.extend(saved)

    @property
    def allowed(self) -> tuple[Prefix, ...]:
        return tuple(self._allowed)

    def extend(self, prefixes: Iterable[Prefix]) -> None:
        """Prefixes that already count (saved, or a project's just trusted): not saved again."""
        for prefix in prefixes:
            prefix = tuple(prefix)
            if prefix and prefix not in self._allowed:
                self._allowed.append(prefix)

    def allow(self, prefix: Prefix, *, save: bool = False) -> str | None:
        """Allows `prefix` for the session and, with `save`, for later ones too. Returns why
        it could not be saved (it still holds for this session), else None."""
        self.extend([prefix])
        if not save or self.persist is None:
            return None
        try:
            self.persist(tuple(prefix))
        except (OSError, ValueError) as e:
            return str(e)
        return None

    def covering(self, tool_name: str, arguments: Mapping[str, Any] | None) -> Prefix | None:
        """The allowed prefix that covers this call (shell only), or None."""
        command = _command(tool_name, arguments)
        if command is None:
            return None
        return next((p for p in self._allowed if matches(command, p)), None)
