"""Which hooks a session runs: the user's `settings.json` and the project's, trust applied.

- `<user dir>/settings.json` (~/.m3agent/settings.json): the user's own, trusted;
- `<project>/.m3agent/settings.json`: it comes with the repository, so its hooks run only
  after `m3agent hooks trust` showed their command lines and the user said yes, and then in
  the tool sandbox (agent/hooks/confined.py), since what they run can be the model's. The trust, in `<home>/hooks-trust.json`, is a
  fingerprint of the project's "hooks" table and a hash of every workspace file a command
  names (agent/hooks/pins.py): any change to the table needs trust again, and a hook whose
  named file changed (the sandboxed model can write the workspace) does not run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.agent.hooks import Hooks, HookSet, parse_hooks
from m3agent.agent.hooks.config import fingerprint
from m3agent.agent.hooks.pins import Pins, changed, named_files, pin
from m3agent.engine.json_file import read_json_object
from m3agent.tools.host_read import default_reader
from m3agent.tools.private_fs import write_private

from .safe_text import one_line

if TYPE_CHECKING:
    from m3agent.tools.sandbox.runner import Sandbox

    from .settings import Settings

PROJECT_SETTINGS = Path(".m3agent") / "settings.json"
TRUST_FILE = "hooks-trust.json"


@dataclass(frozen=True, slots=True)
class HookSources:
    user: HookSet
    project: HookSet
    project_raw: Any  # the project's "hooks" table as written (what trust fingerprints)
    project_path: Path
    project_trusted: bool
    stale: tuple[str, ...] = ()  # files the trusted hooks name that changed since

    def active(self) -> HookSet:
        return self.user.merged(self.project) if self.project_trusted else self.user

    def untrusted_note(self) -> str | None:
        if not self.project or self.project_trusted:
            return None
        lines = [f"  {e}: {one_line(h.command)}" for e, _m, h in self.project.all_commands()]
        if self.stale:
            return (
                f"{self.project_path} has hooks that do not run: {', '.join(self.stale)} "
                "changed since you trusted them (the model can write the workspace); review "
                "and run `m3agent hooks trust` again:\n" + "\n".join(lines)
            )
        return (
            f"{self.project_path} has hooks that are not trusted, so they do not run; "
            "review them and run `m3agent hooks trust` to allow:\n" + "\n".join(lines)
        )


def _read(path: Path) -> dict[str, Any]:
    return read_json_object(path, missing_ok=True)


def _trust_table(home: Path, table: str = "projects") -> dict[str, Any]:
    data = _read(home / TRUST_FILE)
    return data.get(table, {}) if isinstance(data.get(table), dict) else {}


def trusted_files(
    home: Path, cwd: Path, raw: Any, table: str = "projects"
) -> dict[str, str | None] | None:
    """The hashes of the workspace files the trusted commands name, when the project's RAW
    setting is what the user trusted (the hooks' table by default; the status line
    command's in its own table: app/status_line.py); None when it is not. A record from
    before files were pinned holds none: a command naming a file needs trust again."""
    entry = _trust_table(home, table).get(str(cwd.resolve()))
    if isinstance(entry, str):
        return {} if entry == fingerprint(raw) else None
    if not isinstance(entry, dict) or entry.get("hooks") != fingerprint(raw):
        return None
    files = entry.get("files")
    return dict(files) if isinstance(files, dict) else {}


def is_trusted(home: Path, cwd: Path, raw: Any, table: str = "projects") -> bool:
    return trusted_files(home, cwd, raw, table) is not None


def pins_from(record: dict[str, str | None], cwd: Path) -> Callable[[str], Pins]:
    """A command's pins from the trusted record: each file it names, with its trusted hash."""
    missing = "untrusted"  # a named file the record does not hold matches no hash

    def pins_of(command: str) -> Pins:
        return tuple((rel, record.get(rel, missing)) for rel in named_files(command, cwd))

    return pins_of


def load_hooks(user_dir: Path, home: Path, cwd: Path) -> HookSources:
    user_file = user_dir / "settings.json"
    user = parse_hooks(_read(user_file).get("hooks"), str(user_file))
    project_file = cwd / PROJECT_SETTINGS
    # the repository's file: read under the host read policy (tools/host_read.py)
    project_text = default_reader(cwd).settings_text
    raw = read_json_object(project_file, missing_ok=True, read=project_text).get("hooks")
    project = parse_hooks(raw, str(project_file), repository=True)
    files = trusted_files(home, cwd, raw) if project else None
    stale: list[str] = []
    if files is not None:
        project = project.pinned(pins_from(files, cwd))
        for _e, _m, h in project.all_commands():
            stale += [rel for rel in changed(h.pins, cwd) if rel not in stale]
    trusted = files is not None and not stale
    return HookSources(user, project, raw, project_file, trusted, tuple(stale))


def trust_hooks(
    home: Path, cwd: Path, raw: Any, table: str = "projects", commands: list[str] | None = None
) -> dict[str, str | None]:
    """Trusts RAW (the project's hooks table; a status line's in its own table, with its
    COMMANDS) and the workspace files its commands name, as they are now; returns those
    files' hashes (None: named, and absent)."""
    if commands is None and table == "projects":
        project = parse_hooks(raw, str(cwd / PROJECT_SETTINGS))
        commands = [h.command for _e, _m, h in project.all_commands()]
    elif commands is None:  # a status line's table: {"command": ...}
        command = raw.get("command") if isinstance(raw, dict) else None
        commands = [command] if isinstance(command, str) else []
    files = dict(p for c in commands for p in pin(c, cwd))
    path = home / TRUST_FILE
    data = _read(path)
    projects = data.setdefault(table, {})
    projects[str(cwd.resolve())] = {"hooks": fingerprint(raw), "files": files}
    write_private(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    return files


def session_hooks(
    settings: Settings, cwd: Path, sandbox: Sandbox | None = None
) -> tuple[Hooks | None, list[str]]:
    """(the Hooks to pass to the Session or None, notes to show at start). SANDBOX: the
    session's, where the project's hooks run (agent/hooks/confined.py)."""
    src = load_hooks(settings.user_dir or settings.home, settings.home, cwd)
    note = src.untrusted_note()
    active = src.active()
    return (Hooks(active, cwd, sandbox=sandbox) if active else None), ([note] if note else [])
