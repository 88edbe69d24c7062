"""The hooks a session runs: Claude Code's settings shape, parsed and validated.

    {"hooks": {"PreToolUse": [{"matcher": "shell|mcp__git__.*",
                               "hooks": [{"type": "command", "command": "...", "timeout": 30}]}]}}

A matcher is a regular expression over the tool name, anchored at both ends ("" or "*" match
every tool), tried on our name and on Claude Code's names for the tool (tools/claude_names.py:
`Bash` is `shell`, `Edit|Write` the file-changing tools); events without a tool ignore it.
A hook from a project's settings (`repository=True`) runs in the tool sandbox, as does a
user's hook that says `"sandbox": true` (confined.py).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from m3agent.tools.claude_names import claude_names_of

from .pins import Pins

DEFAULT_TIMEOUT_S = 60.0  # Claude Code's default


class HookEvent(StrEnum):
    SESSION_START = "SessionStart"
    USER_PROMPT_SUBMIT = "UserPromptSubmit"
    PRE_TOOL_USE = "PreToolUse"
    POST_TOOL_USE = "PostToolUse"
    NOTIFICATION = "Notification"
    STOP = "Stop"
    SUBAGENT_STOP = "SubagentStop"
    PRE_COMPACT = "PreCompact"


# Events whose matcher is read against a tool name.
TOOL_EVENTS = frozenset({HookEvent.PRE_TOOL_USE, HookEvent.POST_TOOL_USE})


@dataclass(frozen=True, slots=True)
class HookCommand:
    command: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    source: str = ""  # the settings file it came from (shown with the command line)
    # A project hook's: the workspace files its command names, as trusted (pins.py); it runs
    # only while they are unchanged.
    pins: Pins = ()
    # It runs in the tool sandbox (confined.py): a project's always, a user's when it asks.
    sandboxed: bool = False


@dataclass(frozen=True, slots=True)
class HookMatcher:
    matcher: str
    hooks: tuple[HookCommand, ...]
    _pattern: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.matcher in ("", "*"):
            return
        try:
            pattern = re.compile(self.matcher)
        except re.error as e:
            raise ValueError(
                f"hook matcher {self.matcher!r} is not a regular expression: {e}"
            ) from None
        object.__setattr__(self, "_pattern", pattern)

    def matches(self, tool_name: str | None) -> bool:
        """Our tool name or one of Claude Code's for it (`Bash` matches `shell`, `Edit|Write`
        matches the file-changing tools), so Claude Code's matchers work as written."""
        if self._pattern is None or tool_name is None:
            return True
        names = (tool_name, *claude_names_of(tool_name))
        return any(self._pattern.fullmatch(name) is not None for name in names)


@dataclass(frozen=True, slots=True)
class HookSet:
    """Every configured hook, by event, in file order (user config first, then project)."""

    by_event: Mapping[HookEvent, tuple[HookMatcher, ...]] = field(default_factory=dict)

    def commands(self, event: HookEvent, tool_name: str | None = None) -> tuple[HookCommand, ...]:
        out: list[HookCommand] = []
        for m in self.by_event.get(event, ()):
            if event in TOOL_EVENTS and not m.matches(tool_name):
                continue
            out.extend(h for h in m.hooks if h not in out)  # the same command runs once
        return tuple(out)

    def pinned(self, pins_of: Callable[[str], Pins]) -> HookSet:
        """The same hooks, each with its command's pins."""
        return HookSet(
            {
                e: tuple(
                    HookMatcher(
                        m.matcher, tuple(replace(h, pins=pins_of(h.command)) for h in m.hooks)
                    )
                    for m in ms
                )
                for e, ms in self.by_event.items()
            }
        )

    def merged(self, other: HookSet) -> HookSet:
        events = {*self.by_event, *other.by_event}
        return HookSet({e: (*self.by_event.get(e, ()), *other.by_event.get(e, ())) for e in events})

    def all_commands(self) -> list[tuple[HookEvent, str, HookCommand]]:
        """(event, matcher, command) for every hook: what `m3agent hooks list` shows."""
        return [
            (e, m.matcher, h) for e in HookEvent for m in self.by_event.get(e, ()) for h in m.hooks
        ]

    def __bool__(self) -> bool:
        return any(self.by_event.values())


def fingerprint(data: object) -> str:
    """What the user trusted: any change to a project's hooks needs trust again."""
    canon = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def parse_hooks(data: object, source: str = "", *, repository: bool = False) -> HookSet:
    """The "hooks" table of a settings file (the whole file's dict or the table itself).
    REPOSITORY: the file came with the project: every hook of it runs in the sandbox,
    whatever its "sandbox" key says."""
    if isinstance(data, Mapping) and "hooks" in data:
        data = data["hooks"]
    if data is None:
        return HookSet()
    if not isinstance(data, Mapping):
        raise ValueError(f'{source}: "hooks" must be an object of event -> matchers')
    by_event: dict[HookEvent, tuple[HookMatcher, ...]] = {}
    for name, entries in data.items():
        try:
            event = HookEvent(name)
        except ValueError:
            known = ", ".join(HookEvent)
            raise ValueError(f"{source}: unknown hook event {name!r} (known: {known})") from None
        if not isinstance(entries, list):
            raise ValueError(f"{source}: hooks.{name} must be a list of matchers")
        where = f"{source}: hooks.{name}"
        by_event[event] = tuple(_matcher(e, where, source, repository) for e in entries)
    return HookSet(by_event)


def _matcher(entry: object, where: str, source: str, repository: bool) -> HookMatcher:
    if not isinstance(entry, Mapping):
        raise ValueError(f'{where}: each entry must be an object with "hooks"')
    matcher = entry.get("matcher", "")
    if not isinstance(matcher, str):
        raise ValueError(f'{where}: "matcher" must be a string')
    hooks = entry.get("hooks")
    if not isinstance(hooks, list) or not hooks:
        raise ValueError(f'{where}: "hooks" must be a non-empty list')
    out = []
    for h in hooks:
        if not isinstance(h, Mapping) or h.get("type", "command") != "command":
            raise ValueError(f'{where}: only {{"type": "command"}} hooks are supported')
        command = h.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f'{where}: a hook needs a "command" string')
        timeout = h.get("timeout", DEFAULT_TIMEOUT_S)
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            raise ValueError(f'{where}: "timeout" must be a positive number of seconds')
        sandbox = h.get("sandbox", False)
        if not isinstance(sandbox, bool):
            raise ValueError(f'{where}: "sandbox" must be true or false')
        out.append(HookCommand(command, float(timeout), source, sandboxed=repository or sandbox))
    return HookMatcher(matcher, tuple(out))
