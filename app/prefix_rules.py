"""Saved "always allow this command prefix" answers for the shell (Claude Code's
`Bash(git status:*)` rules), in two scopes:

- user: `<home>/permissions.json`, key "shell_prefixes" (beside the tool "allow" list the
  approval gate reads), written by `s` in an approval (that file is app/permission_store.py's:
  its one reader and writer);
- project: `<workspace>/.m3agent/permissions.json`, same key, shared in the repository. A
  cloned repository could allow `rm` that way, so its rules count only once this user trusts
  that file's exact content (`/permissions trust`; kept in `<home>/permissions-trust.json`
  by content hash: an edited file is untrusted again), or `m3agent permissions trust`.

The same trust covers everything else a repository could use to lift approvals: its
`.m3agent/settings.json` rules (below) and its custom commands' `allowed-tools`
(`.m3agent/commands/**.md`, app/extensions.py: granted_tools), each file by its own hash.

A prefix never covers shell syntax (agent/command_prefix.py), wherever it was saved."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from m3agent.agent.config import ToolRule
from m3agent.agent.path_rules import parse_rule
from m3agent.engine.json_file import read_json_object
from m3agent.tools.host_read import ReadRefused, default_reader
from m3agent.tools.private_fs import private_dir, write_private

from . import permission_store as store
from .custom_commands import load_commands
from .safe_text import one_line

USER_FILE = store.FILE
TRUST_FILE = "permissions-trust.json"
PROJECT_FILE = Path(".m3agent") / "permissions.json"
PROJECT_COMMANDS = Path(".m3agent") / "commands"


def _read(path: Path) -> dict[str, Any]:
    try:
        return read_json_object(path)
    except ValueError:  # missing or broken: no rules from it
        return {}


def _read_project(path: Path, cwd: Path) -> dict[str, Any]:
    """_read for the repository's own files, under the host read policy (tools/host_read)."""
    try:
        return read_json_object(path, read=default_reader(cwd).settings_text)
    except ValueError:  # missing, broken or refused: no rules from it
        return {}


_prefixes = store.prefixes_of


# What an untrusted project file's note names: the CLI command and the TUI's.
TRUST_HINT = "`m3agent permissions trust` (the TUI's /permissions trust) uses them"


def _trusted(home: Path, project: Path, cwd: Path) -> bool:
    """This user trusted the file's exact current content."""
    return _read(home / TRUST_FILE).get(str(project.resolve())) == _digest(project, cwd)


def _digest(path: Path, cwd: Path) -> str | None:
    """The project file's hash as read under the host read policy (a link to /dev/zero or to
    a secret has none: it is not trusted, nor read)."""
    try:
        return hashlib.sha256(default_reader(cwd).read_bytes(path)).hexdigest()
    except ReadRefused:
        return None


def load_prefixes(home: Path, cwd: Path) -> tuple[list[tuple[str, ...]], str | None]:
    """(the saved prefixes that count here, a note when the project's file is not trusted)."""
    found = _prefixes(store.read(home))
    project = cwd / PROJECT_FILE
    if not project.is_file():
        return found, None
    if not _trusted(home, project, cwd):
        n = len(_prefixes(_read_project(project, cwd)))
        if not n:  # nothing it would allow: nothing to say
            return found, None
        return found, f"{project} allows {n} shell prefix(es) but is not trusted: {TRUST_HINT}"
    extra = _prefixes(_read_project(project, cwd))
    return found + [p for p in extra if p not in found], None


def save_prefix(home: Path, prefix: tuple[str, ...]) -> None:
    store.add_prefix(home, prefix)


def trusted_file(home: Path, path: Path, cwd: Path) -> bool:
    """Whether this user trusted `path` (a file of the repository at `cwd`) as it is now."""
    digest = _digest(path, cwd)
    return digest is not None and _read(home / TRUST_FILE).get(str(path.resolve())) == digest


def _command_files(cwd: Path) -> list[Path]:
    root = cwd / PROJECT_COMMANDS
    return sorted(p for p in root.rglob("*.md") if p.is_file()) if root.is_dir() else []


def trust_project(home: Path, cwd: Path) -> str:
    """Trusts the project's permissions.json, settings.json and command files as they are
    now."""
    named = [cwd / f for f in (PROJECT_FILE, PROJECT_SETTINGS)]
    files = [(f, _digest(f, cwd)) for f in (*named, *_command_files(cwd))]
    found = [(f, d) for f, d in files if d is not None]
    if not found:
        raise ValueError(f"no {PROJECT_FILE}, {PROJECT_SETTINGS} or {PROJECT_COMMANDS} in {cwd}")
    path = home / TRUST_FILE
    private_dir(home)
    data = _read(path)
    for project, digest in found:
        data[str(project.resolve())] = digest
    write_private(path, json.dumps(data, indent=1))
    shown = [str(f) for f, _ in found if f in named]
    commands = len(found) - len(shown)
    if commands:
        shown.append(f"{commands} command file(s) in {cwd / PROJECT_COMMANDS}")
    return "trusted " + " and ".join(shown) + " (their current content)"


# ---- per-path tool rules (`edit_file(src/**)`, `Edit(src/**)`) ------------------------------
# user: "rules" in <home>/permissions.json ({RULE: allow|ask|deny}), written by /permissions
# (hand-written ones go in the config's [tools] table, quoted: "edit_file(src/**)" = "allow");
# project: Claude Code's `.m3agent/settings.json` {"permissions": {"allow": [...], ...}},
# counted only once trusted (/permissions trust: this file's exact content, as above).
PROJECT_SETTINGS = Path(".m3agent") / "settings.json"
ACTIONS = ("allow", "ask", "deny")


def _checked(rule: str, action: str) -> ToolRule:
    parse_rule(rule)  # RuleError (a ValueError) names the rule and why
    return ToolRule(rule, action)


def user_rules(home: Path) -> list[ToolRule]:
    out = []
    for rule, action in store.rule_entries(home).items():
        try:
            out.append(_checked(str(rule), str(action)))
        except ValueError:
            continue  # a hand-edited bad entry: /permissions lists what counts
    return out


def save_user_rule(home: Path, rule: str, action: str | None) -> str:
    """Adds (or, with action None, removes) a user rule; ValueError for a bad one."""
    if action is not None:
        if action not in ACTIONS:
            raise ValueError(f"action {action!r} is not one of {', '.join(ACTIONS)}")
        _checked(rule, action)
    store.set_rule(home, rule, action)
    return f"{rule} = {action}" if action else f"removed {rule}"


def _settings_entries(project: Path, cwd: Path) -> list[tuple[str, str]]:
    """(rule, action) of a Claude Code settings.json's "permissions" table."""
    perms = _read_project(project, cwd).get("permissions", {})
    return [
        (str(rule), action)
        for action in ACTIONS
        for rule in (perms.get(action, []) if isinstance(perms, dict) else [])
        if isinstance(perms.get(action, []), list)
    ]


def project_entries(cwd: Path) -> list[str]:
    """What trusting the project's files would let count, one line each (for the user who
    decides), escaped (app/safe_text.py: a rule's ESC and CR bytes could redraw the line
    above it): its shell prefixes, its permission rules, and the tools each of its command
    files lets run unasked (`allowed-tools`: trust_project trusts those files too)."""
    prefixes, settings = cwd / PROJECT_FILE, cwd / PROJECT_SETTINGS
    shell = _prefixes(_read_project(prefixes, cwd)) if prefixes.is_file() else []
    rules = _settings_entries(settings, cwd) if settings.is_file() else []
    commands, _ = load_commands([cwd / PROJECT_COMMANDS], default_reader(cwd))
    lines = [f"allow shell prefix: {' '.join(p)}" for p in shell]
    lines += [f"{action} {rule}" for rule, action in rules]
    lines += [
        f"command /{c.name} runs unasked: {', '.join(c.allowed_tools)}"
        for c in commands
        if c.allowed_tools
    ]
    return [one_line(line) for line in lines]


def project_rules(home: Path, cwd: Path) -> tuple[list[ToolRule], list[str]]:
    """(the project's rules that count, notes: untrusted, or rules refused and why)."""
    project = cwd / PROJECT_SETTINGS
    if not project.is_file():
        return [], []
    entries = _settings_entries(project, cwd)
    if not _trusted(home, project, cwd):
        if not entries:  # hooks only, say: `m3agent hooks trust` is theirs; nothing to say
            return [], []
        return [], [
            f"{project} has {len(entries)} permission rule(s) but is not trusted: {TRUST_HINT}"
        ]
    rules: list[ToolRule] = []
    notes: list[str] = []
    for rule, action in entries:
        try:
            rules.append(_checked(rule, action))
        except ValueError as e:
            notes.append(f"{project}: refused: {e}")
    return rules, notes


def saved_rules(home: Path, cwd: Path) -> tuple[list[ToolRule], list[str]]:
    """User rules, then the trusted project's: after the config's own (deny still wins)."""
    rules, notes = project_rules(home, cwd)
    return user_rules(home) + rules, notes
