"""Issue 36, class 7: every file that can hold a secret or the user's data is created 0600 in
0700 directories, whatever the umask (000 and 022 here).

The writers run for real: `m3agent mcp add -e TOKEN=...` (the config file, in the data home
and under a fresh $M3AGENT_CONFIG directory), first-run settings, `hooks trust`, `mcp trust`,
`/permissions` rules and prefixes, the prompt history, a crash log, an MCP server's media, and
a whole session (its log and the snapshot's caches). Then every file and directory under the
data home and the config directory is checked. The control gives tools/private_fs.py the
modes an ordinary open would use and finds the same files readable by everyone.
"""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from m3agent.app.cli import build_app
from m3agent.tools import private_fs
from typer.testing import CliRunner


@pytest.fixture(params=[0o000, 0o022], ids=["umask000", "umask022"])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / ".m3agent").mkdir(parents=True)
    hooks = {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}
    perms = {"permissions": {"allow": ["read_file(src/**)"]}}
    (repo / ".m3agent" / "settings.json").write_text(json.dumps({"hooks": hooks, **perms}))
    (repo / ".m3agent" / "permissions.json").write_text(json.dumps({"shell_prefixes": [["ls"]]}))
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"p": {"command": "true"}}}))
    (repo / "main.py").write_text("print('hello')\n")
    return repo


def _write_everything(home: Path, repo: Path, config: Path) -> None:
    from m3agent.app.prefix_rules import save_prefix, save_user_rule, trust_project
    from m3agent.app.settings import save_settings
    from m3agent.app.tui.crash import write_crash_text
    from m3agent.app.tui.history import append_history
    from m3agent.tools.mcp.adapter import _binary

    runner = CliRunner()
    for args in (
        ["mcp", "add", "srv", "-e", "TOKEN=sekrit", "--", "server-cmd"],
        ["hooks", "trust", "--yes", "--cwd", str(repo)],
        ["mcp", "trust", "--cwd", str(repo)],
    ):
        r = runner.invoke(build_app(), args)
        assert r.exit_code == 0, (args, r.output)
    r = runner.invoke(
        build_app(),
        ["mcp", "add", "two", "-e", "TOKEN=sekrit", "--", "cmd"],
        env={"M3AGENT_CONFIG": str(config)},
    )
    assert r.exit_code == 0, r.output
    save_settings(home / "config.toml", {"model": "m"})
    trust_project(home, repo)
    save_prefix(home, ("git", "status"))
    save_user_rule(home, "edit_file(src/**)", "allow")
    append_history(home / "prompt_history.jsonl", "my secret prompt")
    write_crash_text("Traceback: token=sekrit", home / "logs")
    _binary(base64.b64encode(b"\x89PNG").decode(), "image/png", home / "mcp-media", [], "img")


def _session(repo: Path) -> None:
    """A whole session with the snapshot on: its log and the context caches."""
    import asyncio

    from m3agent.agent import events as ev
    from m3agent.agent import ops
    from m3agent.app.factory import build_session
    from m3agent.app.settings import load_settings
    from m3agent.engine.backends.scripted import ScriptedEngine

    session = build_session(load_settings(), cwd=repo, engine=ScriptedEngine(["</mm:think>ok"]))

    async def go() -> None:
        try:
            session.submit(ops.UserTurn("hi"))
            async for e in session.events():
                if isinstance(e, ev.TurnComplete):
                    break
        finally:
            await session.close()

    asyncio.run(go())


def _exposed(*roots: Path) -> list[str]:
    """Every file readable by group or others and every directory not 0700, under roots."""
    bad = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            for name in [*dirnames, *filenames]:
                p = Path(dirpath) / name
                st = os.lstat(p)
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISDIR(st.st_mode) and mode != 0o700:
                    bad.append(f"{p} {mode:o}")
                elif stat.S_ISREG(st.st_mode) and mode & 0o077:
                    bad.append(f"{p} {mode:o}")
    return bad


def test_secrets_and_user_data_are_private_whatever_the_umask(tmp_path, home, umask):
    repo = _repo(tmp_path)
    config = tmp_path / "cfg" / "m3" / "config.toml"
    _write_everything(home, repo, config)
    if umask == 0:
        _session(repo)
        assert (home / "sessions").is_dir() and (home / "context-cache").is_dir()
    assert "TOKEN" in (home / "config.toml").read_text() and "TOKEN" in config.read_text()
    assert (home / "mcp-media").is_dir() and (home / "prompt_history.jsonl").is_file()
    assert _exposed(home, tmp_path / "cfg") == []


def test_control_with_ordinary_modes_the_same_writers_expose_everything(
    tmp_path, home, monkeypatch
):
    old = os.umask(0)
    try:
        monkeypatch.setattr(private_fs, "FILE_MODE", 0o666)
        monkeypatch.setattr(private_fs, "DIR_MODE", 0o777)
        repo = _repo(tmp_path)
        _write_everything(home, repo, tmp_path / "cfg" / "m3" / "config.toml")
    finally:
        os.umask(old)
    exposed = "\n".join(_exposed(home, tmp_path / "cfg"))
    for name in ("config.toml 666", "prompt_history.jsonl 666", "mcp-media 777", "m3 777"):
        assert name in exposed, exposed
