"""Instruction files found hierarchically (the user's ~/.m3agent/AGENTS.md, the workspace's
parents, outermost first; AGENTS.md else CLAUDE.md) with `@path` imports, as Claude Code."""

from __future__ import annotations

from m3agent.agent.instructions import find_instructions, instructions_message_text
from m3agent.tools.host_read import HostReader
from m3agent.tools.sandbox.policy import SandboxPolicy


def _reader(ws, home, *trusted):
    return HostReader(SandboxPolicy(workspace=ws, home=home), trusted=trusted)


def test_user_parents_and_imports(tmp_path):
    home = tmp_path / "home"
    (home / ".m3agent").mkdir(parents=True)
    user = home / ".m3agent" / "AGENTS.md"
    user.write_text("Always be brief. @~/style.md\n")
    (home / "style.md").write_text("Use short names.\n")
    mono = tmp_path / "mono"
    pkg = mono / "packages" / "app"
    pkg.mkdir(parents=True)
    (mono / "CLAUDE.md").write_text("Monorepo rules. See @docs/build.md\n")
    (mono / "docs").mkdir()
    (mono / "docs" / "build.md").write_text("Build with make. @../CLAUDE.md\n")  # a cycle
    (mono / "packages" / "AGENTS.md").write_text("Packages: AGENTS.md wins.\n")
    (mono / "packages" / "CLAUDE.md").write_text("not read: AGENTS.md is there\n")
    (pkg / "AGENTS.md").write_text(
        "The app. @notes.md\n```\n@not-an-import.md\n```\nmail me@example.com `@code.md`\n"
    )
    (pkg / "notes.md").write_text("App notes.\n")
    for name in ("not-an-import.md", "code.md"):
        (pkg / name).write_text("must not be read\n")

    found = find_instructions(pkg, user, _reader(pkg, home, user))
    got = [(f.scope, f.path.relative_to(tmp_path).as_posix()) for f in found]
    assert got == [
        ("user", "home/.m3agent/AGENTS.md"),
        ("import", "home/style.md"),
        ("parent", "mono/CLAUDE.md"),
        ("import", "mono/docs/build.md"),
        ("parent", "mono/packages/AGENTS.md"),
        ("import", "mono/packages/app/notes.md"),  # the workspace's own file's import
    ]
    text = instructions_message_text(found)
    assert "must not be read" not in text and "not read: AGENTS.md" not in text
    assert "The app." not in text  # the workspace's own file is the snapshot's


def test_nothing_found(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    assert find_instructions(ws, tmp_path / "missing.md", _reader(ws, tmp_path)) == []
