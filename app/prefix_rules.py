"""Saved "always allow this command prefix" answers for the shell (Claude Code's
`Bash(git status:*)` rules), in two scopes:

- user: `<home>/permissions.json`, key "shell_prefixes" (beside the tool "allow" list the
  approval gate reads), written by `s` in an approval;
- project: `<workspace>/.m3agent/permissions.json`, same key, shared in the repository. A
  cloned repository could allow `rm` that way, so its rules count only once this user trusts
  that file's exact content (`/permissions trust`; kept in `<home>/permissions-trust.json`
  by content hash: an edited file is untrusted again).

A prefix never covers shell syntax (app/command_prefix.py), wherever it was saved."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from m3agent.tools.private_fs import private_dir

USER_FILE = "permissions.json"
TRUST_FILE = "permissions-trust.json"
PROJECT_FILE = Path(".m3agent") / "permissions.json"


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _prefixes(data: dict) -> list[tuple[str, ...]]:
    raw = data.get("shell_prefixes", [])
    out = []
    for p in raw if isinstance(raw, list) else []:
        if isinstance(p, list) and p and all(isinstance(w, str) and w for w in p):
            out.append(tuple(p))
    return out


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def load_prefixes(home: Path, cwd: Path) -> tuple[list[tuple[str, ...]], str | None]:
    """(the saved prefixes that count here, a note when the project's file is not trusted)."""
    found = _prefixes(_read(home / USER_FILE))
    project = cwd / PROJECT_FILE
    if not project.is_file():
        return found, None
    trusted = _read(home / TRUST_FILE).get(str(project.resolve()))
    if trusted != _digest(project):
        n = len(_prefixes(_read(project)))
        return found, (
            f"{project} allows {n} shell prefix(es) but is not trusted: "
            "/permissions trust uses them"
        )
    return found + [p for p in _prefixes(_read(project)) if p not in found], None


def save_prefix(home: Path, prefix: tuple[str, ...]) -> None:
    path = home / USER_FILE
    private_dir(home)
    data = _read(path)
    saved = _prefixes(data)
    if prefix not in saved:
        saved.append(prefix)
    data["shell_prefixes"] = [list(p) for p in saved]
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    path.chmod(0o600)


def trust_project(home: Path, cwd: Path) -> str:
    project = cwd / PROJECT_FILE
    digest = _digest(project)
    if digest is None:
        raise ValueError(f"no {PROJECT_FILE} in {cwd}")
    path = home / TRUST_FILE
    private_dir(home)
    data = _read(path)
    data[str(project.resolve())] = digest
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    path.chmod(0o600)
    return f"trusted {project} (its current content)"
