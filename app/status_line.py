"""Which status line command the TUI runs (Claude Code's `statusLine` setting), trust applied.

    {"statusLine": {"type": "command", "command": "~/.m3agent/statusline.sh", "timeout": 2}}

in `<user dir>/settings.json` or a project's `.m3agent/settings.json`, or in config.toml:

    [status_line]
    type = "command"
    command = "~/.m3agent/statusline.sh"

A project's wins over the user's (settings.json's over config.toml's), as in Claude Code; but a
project's command came with the repository, so it runs only after `m3agent hooks trust`
showed it (its fingerprint in `<home>/hooks-trust.json`, beside the hooks' own: the same
trust, the same file), only while the workspace files it names are as trusted
(agent/hooks/pins.py, as a hook's), and then in the tool sandbox under the session's policy
with nothing writable (`policy`: a display has nothing to change, and its writes would land
outside any tool call's checkpoint), as a project's hook does (agent/hooks/confined.py); the
user's own runs on the host. What the command is fed and how its output is shown: app/tui/status_line.py.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.agent.hooks.pins import Pins, changed
from m3agent.engine.json_file import read_json_object
from m3agent.tools.sandbox.policy import SandboxMode

from .hooks_settings import PROJECT_SETTINGS, pins_from, trusted_files

if TYPE_CHECKING:
    from m3agent.tools.sandbox.policy import SandboxPolicy

    from .settings import Settings

TRUST_TABLE = "status_lines"  # in hooks-trust.json, beside the hooks' "projects"
DEFAULT_TIMEOUT_S = 2.0
MAX_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class StatusLineCommand:
    command: str
    source: str  # the file it came from
    timeout_s: float = DEFAULT_TIMEOUT_S
    padding: int = 0  # spaces before the line (Claude Code's "padding")
    pins: Pins = ()  # a project's: the workspace files it names, as trusted (hooks' pins)
    # A project's: the sandbox policy it runs under (the session's); None: on the host.
    policy: SandboxPolicy | None = None

    @classmethod
    def parse(cls, raw: object, source: str) -> StatusLineCommand:
        """From the setting's table; ValueError naming SOURCE for a malformed one."""
        if not isinstance(raw, dict):
            raise ValueError(f'{source}: statusLine must be {{"type": "command", "command": ...}}')
        if raw.get("type", "command") != "command":
            raise ValueError(f"{source}: statusLine type {raw.get('type')!r}: only 'command'")
        command = raw.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ValueError(f"{source}: statusLine needs a command")
        timeout = raw.get("timeout", DEFAULT_TIMEOUT_S)
        padding = raw.get("padding", 0)
        if not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_TIMEOUT_S:
            raise ValueError(f"{source}: statusLine timeout must be 0-{MAX_TIMEOUT_S:g} seconds")
        if not isinstance(padding, int) or not 0 <= padding <= 20:
            raise ValueError(f"{source}: statusLine padding must be 0-20")
        return cls(command, source, float(timeout), padding)


def project_status_line(cwd: Path) -> Any:
    """The project's statusLine table as written (None without one): what trust covers."""
    return read_json_object(cwd / PROJECT_SETTINGS, missing_ok=True).get("statusLine")


def load_status_line(settings: Settings, cwd: Path) -> tuple[StatusLineCommand | None, str | None]:
    """(the command the TUI runs or None, a note to show at start: an untrusted project's)."""
    project_file = cwd / PROJECT_SETTINGS
    raw = project_status_line(cwd)
    note = None
    if raw is not None:
        chosen = StatusLineCommand.parse(raw, str(project_file))
        files = trusted_files(settings.home, cwd, raw, TRUST_TABLE)
        if files is not None:
            pins = pins_from(files, cwd)(chosen.command)
            stale = changed(pins, cwd)
            if not stale:
                return replace(chosen, pins=pins, policy=_read_only(settings, cwd)), None
            note = (
                f"{project_file} sets a status line command that does not run: "
                f"{', '.join(stale)} changed since you trusted it (the model can write the "
                "workspace); review and run `m3agent hooks trust` again"
            )
        else:
            note = (
                f"{project_file} sets a status line command that is not trusted, so it does "
                f"not run: {chosen.command}; review it and run `m3agent hooks trust` to allow"
            )
    user_file = (settings.user_dir or settings.home) / "settings.json"
    raw = read_json_object(user_file, missing_ok=True).get("statusLine")
    if raw is not None:
        return StatusLineCommand.parse(raw, str(user_file)), note
    raw = _config_table(settings.config_path)
    if raw is not None:
        return StatusLineCommand.parse(raw, str(settings.config_path)), note
    return None, note


def _read_only(settings: Settings, cwd: Path) -> SandboxPolicy:
    from .factory import sandbox_policy

    return sandbox_policy(settings, cwd).with_(mode=SandboxMode.READ_ONLY)


def _config_table(path: Path) -> Any:
    """config.toml's [status_line] (read here: Settings holds no program to run)."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")).get("status_line")
    except (OSError, tomllib.TOMLDecodeError):  # load_settings already said what is wrong
        return None
