"""Which hooks a session runs: the user's `settings.json` and the project's, trust applied.

- `<user dir>/settings.json` (~/.m3agent/settings.json): the user's own, trusted;
- `<project>/.m3agent/settings.json`: it comes with the repository, so its hooks (programs
  that run as the user, outside the sandbox) run only after `m3agent hooks trust` showed
  their command lines and the user said yes. The trust is a fingerprint of the project's
  "hooks" table in `<home>/hooks-trust.json`: any change needs trust again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.agent.hooks import HookSet, parse_hooks
from m3agent.agent.hooks.config import fingerprint
from m3agent.engine.json_file import read_json_object
from m3agent.tools.host_read import default_reader
from m3agent.tools.private_fs import write_private

from .safe_text import one_line

if TYPE_CHECKING:
    from m3agent.agent.hooks import Hooks

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

    def active(self) -> HookSet:
        return self.user.merged(self.project) if self.project_trusted else self.user

    def untrusted_note(self) -> str | None:
        if not self.project or self.project_trusted:
            return None
        lines = [f"  {e}: {one_line(h.command)}" for e, _m, h in self.project.all_commands()]
        return (
            f"{self.project_path} has hooks that are not trusted, so they do not run; "
            "review them and run `m3agent hooks trust` to allow:\n" + "\n".join(lines)
        )


def _read(path: Path) -> dict[str, Any]:
    return read_json_object(path, missing_ok=True)


def _trust_table(home: Path, table: str = "projects") -> dict[str, Any]:
    data = _read(home / TRUST_FILE)
    return data.get(table, {}) if isinstance(data.get(table), dict) else {}


def is_trusted(home: Path, cwd: Path, raw: Any, table: str = "projects") -> bool:
    """The project's RAW setting is what the user trusted (the hooks' table by default; the
    status line command's in its own table: app/status_line.py)."""
    return _trust_table(home, table).get(str(cwd.resolve())) == fingerprint(raw)


def load_hooks(user_dir: Path, home: Path, cwd: Path) -> HookSources:
    user_file = user_dir / "settings.json"
    user = parse_hooks(_read(user_file).get("hooks"), str(user_file))
    project_file = cwd / PROJECT_SETTINGS
    # the repository's file: read under the host read policy (tools/host_read.py)
    project_text = default_reader(cwd).settings_text
    raw = read_json_object(project_file, missing_ok=True, read=project_text).get("hooks")
    project = parse_hooks(raw, str(project_file))
    trusted = bool(project) and is_trusted(home, cwd, raw)
    return HookSources(user, project, raw, project_file, trusted)


def trust_hooks(home: Path, cwd: Path, raw: Any, table: str = "projects") -> None:
    path = home / TRUST_FILE
    data = _read(path)
    projects = data.setdefault(table, {})
    projects[str(cwd.resolve())] = fingerprint(raw)
    write_private(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def session_hooks(settings: Settings, cwd: Path) -> tuple[Hooks | None, list[str]]:
    """(the Hooks to pass to the Session or None, notes to show at start)."""
    from m3agent.agent.hooks import Hooks

    src = load_hooks(settings.user_dir or settings.home, settings.home, cwd)
    note = src.untrusted_note()
    active = src.active()
    return (Hooks(active, cwd) if active else None), ([note] if note else [])
