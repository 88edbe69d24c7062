"""Issue 37 item 7: a project's `.m3agent/settings.json` with hooks and no permission rules
says nothing about permission rules (before or after `m3agent hooks trust`); one with rules
names a command that exists, `m3agent permissions trust`, and after it the note is gone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ..support.cli import CONSOLE_SCRIPT, cli_env

SCRIPT = '["<mm:think>Nothing to do.</mm:think>Done: nothing to change."]'


def project(root: Path, settings: dict) -> Path:
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".m3agent").mkdir()
    (root / ".m3agent" / "settings.json").write_text(json.dumps(settings))
    return root


def m3agent(home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [*CONSOLE_SCRIPT, *args], env=cli_env(home), cwd=cwd, capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r


def notes(home: Path, cwd: Path, script: Path) -> list[str]:
    r = m3agent(home, cwd, "run", "--engine", "scripted", "--script", str(script),
                "--accept-sandbox-gaps", "hi")  # fmt: skip
    return [line for line in r.stderr.splitlines() if "not trusted" in line]


def test_permission_notes_only_for_rules_and_name_a_real_command(tmp_path):
    home = tmp_path / "home"
    script = tmp_path / "script.json"
    script.write_text(SCRIPT)
    hook = {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}
    hooks_only = project(tmp_path / "hooks-only", {"hooks": hook})
    m3agent(home, hooks_only, "hooks", "trust", "--yes")
    assert notes(home, hooks_only, script) == []  # was "has 0 permission rule(s)"

    ruled = project(tmp_path / "ruled", {"permissions": {"deny": ["edit_file(secret/**)"]}})
    settings = ruled / ".m3agent" / "settings.json"
    assert notes(home, ruled, script) == [
        f"note: {settings} has 1 permission rule(s) but is not trusted: "
        "`m3agent permissions trust` (the TUI's /permissions trust) uses them"
    ]
    shown = m3agent(home, ruled, "permissions", "trust", "--yes").stdout
    assert "deny edit_file(secret/**)" in shown and f"trusted {settings}" in shown
    assert notes(home, ruled, script) == []
