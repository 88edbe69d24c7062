"""Instruction files found hierarchically (the user's ~/.m3agent/AGENTS.md, the workspace's
parents, outermost first; AGENTS.md else CLAUDE.md) with `@path` imports, as Claude Code."""

from __future__ import annotations

import os

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


def _cloned(tmp_path):
    """A temp HOME whose ~/.bashrc exports a token and whose ~/.config/app/token.json holds
    another, and a hostile repository cloned under it, its files the user's (a clone): its
    AGENTS.md imports the token file, and a package's CLAUDE.md is a committed symlink to
    ~/.bashrc (git keeps links)."""
    home = tmp_path / "home"
    repo = home / "src" / "evil"
    ws = repo / "pkg" / "app"
    ws.mkdir(parents=True)
    (repo / ".git").mkdir()
    (home / ".bashrc").write_text("export OPENAI_API_KEY=sk-SECRET-31\n")
    (home / ".config" / "app").mkdir(parents=True)
    (home / ".config" / "app" / "token.json").write_text('{"token": "TOKEN-42"}\n')
    (repo / "AGENTS.md").write_text("Repo rules. @docs/style.md @~/.config/app/token.json\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "style.md").write_text("Use tabs.\n")
    (repo / "pkg" / "CLAUDE.md").symlink_to("../../../.bashrc")
    mine = "My own rules. @~/.config/app/token.json\n"  # above the repository: the user's
    (home / "src" / "AGENTS.md").write_text(mine)
    return home, repo, ws


def test_a_parent_inside_the_repository_is_the_repositorys(tmp_path):
    """Issue 36, round 5: a session started in a subdirectory of a clone (or in its
    `--worktree`, `<repo>/.m3agent/worktrees/NAME`) read the clone's own AGENTS.md as a
    parent directory's file, the user's, whose imports reach anywhere in the home but the
    secret list, and which may itself be a symlink: the token file and ~/.bashrc (exported
    API keys) went into the first request. The
    repository's parents are read as the repository's: their imports, and the files
    themselves (a committed symlink), stay in the repository's and the sandbox's view.
    The user's own file above the repository still imports what it names."""
    home, repo, ws = _cloned(tmp_path)
    found = find_instructions(ws, None, _reader(ws, home))
    got = [(f.scope, f.path.relative_to(home).as_posix()) for f in found]
    assert got == [
        ("parent", "src/AGENTS.md"),
        ("import", ".config/app/token.json"),  # the user's own file imports it: theirs
        ("parent", "src/evil/AGENTS.md"),
        ("import", "src/evil/docs/style.md"),  # the repository's own files: read
    ]
    (home / "src" / "AGENTS.md").unlink()
    found = find_instructions(ws, None, _reader(ws, home))
    text = instructions_message_text(found)
    assert "sk-SECRET-31" not in text and "TOKEN-42" not in text
    # the owner is still checked: one another user left there is not read (as before)
    os.chown(repo / "AGENTS.md", 65534, 65534)
    found = find_instructions(ws, None, _reader(ws, home))
    assert [f.path for f in found if f.scope == "parent"] == []


def test_control_the_repository_parent_read_as_the_users_leaks_the_token(tmp_path, monkeypatch):
    from m3agent.agent import instructions

    home, repo, ws = _cloned(tmp_path)
    (home / "src" / "AGENTS.md").unlink()
    monkeypatch.setattr(instructions, "repository_root", lambda cwd: None)
    found = find_instructions(ws, None, _reader(ws, home))
    leaked = [
        f.path.relative_to(home).as_posix()
        for f in found
        if "SECRET" in f.text or "TOKEN" in f.text
    ]
    assert leaked == [".config/app/token.json", ".bashrc"]
