"""The approval gate decides for every front end alike (issue 40): a saved shell prefix, the
per-program command rules and the permission mode give the same answer to `m3agent run`
(the real CLI, and the headless runner with its terminal prompt) and to an editor over ACP
(the real `m3agent acp` server); tests/app/tui/test_gate_decides.py drives the TUI to the
same answers. The scripted engine replays real M3 markup; the tools run for real.

The script: `echo one` (covered by the saved prefix `echo`), `timeout 5 echo two` (a wrapper:
its prefix is `timeout 5 echo`, so `echo` does not cover it) and `ls` (not saved)."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from pathlib import Path

import pytest

from ..support.markup import answer, calls, invoke

EXE = str(Path(sys.executable).parent / "m3agent")
SCRIPT = [
    calls(invoke("shell", command="echo one")),
    calls(invoke("shell", command="timeout 5 echo two")),
    calls(invoke("shell", command="ls")),
    answer("Done."),
]
ASKED = ["timeout 5 echo two", "ls"]  # what every front end asks about, in order
# A saved path rule (`/permissions allow write_file(notes/**)`): notes/a.txt is written
# unasked, b.txt is asked about.
RULE_SCRIPT = [
    calls(invoke("write_file", path="notes/a.txt", content="a\n")),
    calls(invoke("write_file", path="b.txt", content="b\n")),
    answer("Done."),
]


def save_echo(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "permissions.json").write_text(json.dumps({"shell_prefixes": [["echo"]]}))


def save_rule(home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "permissions.json").write_text(json.dumps({"rules": {"write_file(notes/**)": "allow"}}))


def finished(evs: list[dict]) -> list[tuple[str, bool]]:
    return [(e["output"].strip(), e["is_error"]) for e in evs if e["type"] == "tool_call_finished"]


# ---- headless: the real CLI ------------------------------------------------------------


def test_run_honours_a_saved_prefix_and_asks_the_rest(cli, repo, m3):
    save_echo(cli.home)
    script = cli.script(*SCRIPT)
    r = cli.run_scripted(
        "go", script, repo, "--approval", "untrusted", "--output-format", "stream-json"
    )
    assert r.returncode == 0, r.stderr
    evs = m3.events(r.stdout)
    asked = [e["arguments"]["command"] for e in evs if e["type"] == "approval_request"]
    assert asked == ASKED  # no terminal: each is denied, and echo one was never asked
    done = finished(evs)
    assert done[0][0].endswith("one") and not done[0][1]
    assert all(err for _, err in done[1:])
    first = [e for e in evs if e["type"] == "tool_call_finished"][0]
    assert first["metadata"]["allowed_by"] == "echo …"


def test_run_honours_a_saved_path_rule(cli, repo, m3):
    save_rule(cli.home)
    r = cli.run_scripted(
        "go",
        cli.script(*RULE_SCRIPT),
        repo,
        "--approval",
        "untrusted",
        "--output-format",
        "stream-json",
    )
    assert r.returncode == 0, r.stderr
    evs = m3.events(r.stdout)
    assert [e["arguments"]["path"] for e in evs if e["type"] == "approval_request"] == ["b.txt"]
    assert (repo / "notes/a.txt").read_text() == "a\n" and not (repo / "b.txt").exists()


def test_run_in_plan_mode_denies_even_a_saved_prefix(cli, repo, m3):
    save_echo(cli.home)
    script = cli.script(calls(invoke("shell", command="echo one")), answer("Plan."))
    r = cli.run_scripted(
        "go",
        script,
        repo,
        "--approval",
        "untrusted",
        "--permission-mode",
        "plan",
        "--output-format",
        "stream-json",
    )
    assert r.returncode == 0, r.stderr
    evs = m3.events(r.stdout)
    assert not [e for e in evs if e["type"] == "approval_request"]
    (out, err), *_ = finished(evs)
    assert err and "plan mode" in out


# ---- headless: the runner with its terminal prompt ---------------------------------------


def _run_headless(home: Path, repo: Path, replies: list[str], answers: str) -> tuple[str, str]:
    """One `m3agent run` turn in this process: the factory's session, the headless runner and
    its terminal approver reading ANSWERS; (what the prompt showed, the stream-json out)."""
    from m3agent.agent.ops import UserTurn
    from m3agent.app.factory import build_session
    from m3agent.app.headless import make_renderer, run_headless
    from m3agent.app.headless_approvals import tty_approver
    from m3agent.app.settings import load_settings
    from m3agent.engine.backends.scripted import ScriptedEngine

    settings = load_settings().override(engine="scripted", approval="untrusted")
    assert settings.home == home
    session = build_session(settings, cwd=repo, engine=ScriptedEngine(replies))
    err, out = io.StringIO(), io.StringIO()
    approve = tty_approver(err, stdin=io.StringIO(answers), home=home)

    async def main() -> int:
        try:
            return await run_headless(
                session, UserTurn("go"), make_renderer("stream-json", out), approve
            )
        finally:
            await session.engine.close()

    assert asyncio.run(main()) == 0
    return err.getvalue(), out.getvalue()


def test_headless_prompt_p_allows_a_prefix_for_the_run_not_every_command(home, repo):
    """`p` accepts the prefix the gate offers (`echo`); `echo two --x` then runs unasked,
    `echo x; rm` (shell syntax) is asked about; `a` (every shell call) is not offered."""
    shell = [
        calls(invoke("shell", command=c))
        for c in ("echo one", "echo one", "echo two --x", "echo x; echo y")
    ]
    asked, out = _run_headless(home, repo, [*shell, answer("Done.")], "a\np\nn\n")
    evs = [json.loads(line) for line in out.splitlines()]
    assert asked.count("Approve shell") == 3  # "echo two --x" was covered: not asked
    assert "[p] always `echo …`" in asked and "[a]lways" not in asked
    assert [err for _, err in finished(evs)] == [True, False, False, True]
    assert not (home / "permissions.json").exists()  # `p` is for this run only


def test_headless_prompt_s_saves_the_prefix_for_later_runs(home, repo):
    """`s` saves the offered prefix (user scope); the next run's gate starts with it."""
    first, _ = _run_headless(
        home, repo, [calls(invoke("shell", command="pytest -q")), answer("ok")], "s\n"
    )
    assert "[s] always, saved" in first
    assert json.loads((home / "permissions.json").read_text())["shell_prefixes"] == [["pytest"]]
    replies = [
        calls(invoke("shell", command="pytest tests/a.py")),
        calls(invoke("shell", command="make")),
        answer("ok"),
    ]
    later, _ = _run_headless(home, repo, replies, "n\n")
    assert later.count("Approve shell") == 1 and "make" in later  # only make was asked


# ---- ACP: the real server ----------------------------------------------------------------


class Editor:
    """The editor side: records what it is asked (and the options) and answers ANSWER."""

    def __init__(self, answer: str = "deny") -> None:
        self.asked: list[str] = []
        self.options: list[dict[str, str]] = []
        self.updates: list = []
        self.answer = answer

    async def session_update(self, session_id, update, **kw):
        self.updates.append(update)

    async def request_permission(self, session_id, tool_call, options, **kw):
        from acp.schema import AllowedOutcome, RequestPermissionResponse

        args = tool_call.raw_input
        self.asked.append(args.get("command") or args.get("path"))
        self.options.append({o.option_id: o.name for o in options})
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.answer)
        )

    def outputs(self) -> list[tuple[str, str]]:
        return [
            (u.raw_output["output"].strip(), u.status)
            for u in self.updates
            if u.session_update == "tool_call_update" and u.status
        ]


def _acp(
    cli, repo: Path, script: list[str], mode: str | None = None, answer: str = "deny"
) -> Editor:
    acp = pytest.importorskip("acp")
    from acp.schema import ClientCapabilities, FileSystemCapabilities

    path = cli.script(*script)
    args = ["acp", "--engine", "scripted", "--script", str(path), "--approval", "untrusted"]
    editor = Editor(answer)

    async def main() -> None:
        async with acp.spawn_agent_process(editor, EXE, *args, env=cli.env(), cwd=repo) as (
            conn,
            _proc,
        ):
            caps = ClientCapabilities(fs=FileSystemCapabilities(), terminal=False)
            await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps)
            sid = (await conn.new_session(cwd=str(repo), mcp_servers=[])).session_id
            if mode is not None:
                await conn.set_session_mode(session_id=sid, mode_id=mode)
            r = await conn.prompt(session_id=sid, prompt=[acp.text_block("go")])
            assert r.stop_reason == "end_turn"

    asyncio.run(asyncio.wait_for(main(), 120))
    return editor


def test_acp_honours_a_saved_prefix_and_asks_the_rest(cli, repo):
    save_echo(cli.home)
    editor = _acp(cli, repo, SCRIPT)
    assert editor.asked == ASKED  # as `m3agent run` and the TUI: echo one never asked
    outputs = editor.outputs()
    assert outputs[0][0].endswith("one") and outputs[0][1] == "completed"
    assert [s for _, s in outputs[1:]] == ["failed", "failed"]


def test_acp_offers_the_prefix_and_the_gate_keeps_it(cli, repo):
    """The editor is offered the prefix the gate offers (as `p` in run and the TUI); once
    picked, a later command with that prefix runs unasked; nothing is saved. Picking it where
    it was not offered (shell syntax) is no approval."""
    script = [
        calls(invoke("shell", command="timeout 5 echo two")),
        calls(invoke("shell", command="timeout 5 echo three")),
        calls(invoke("shell", command="echo x; echo y")),
        answer("Done."),
    ]
    editor = _acp(cli, repo, script, answer="approve_prefix")
    assert editor.asked == ["timeout 5 echo two", "echo x; echo y"]
    assert editor.options[0]["approve_prefix"] == "Allow `timeout 5 echo …` for this session"
    assert "approve_prefix" not in editor.options[1]  # shell syntax: nothing to offer
    assert [s for _, s in editor.outputs()] == ["completed", "completed", "failed"]
    assert not (cli.home / "permissions.json").exists()


def test_acp_honours_a_saved_path_rule(cli, repo):
    save_rule(cli.home)
    editor = _acp(cli, repo, RULE_SCRIPT)
    assert editor.asked == ["b.txt"]  # as `m3agent run` and the TUI
    assert (repo / "notes/a.txt").read_text() == "a\n" and not (repo / "b.txt").exists()


def test_acp_in_plan_mode_denies_even_a_saved_prefix(cli, repo):
    save_echo(cli.home)
    editor = _acp(cli, repo, [calls(invoke("shell", command="echo one")), answer("Plan.")], "plan")
    assert editor.asked == []
    (out, status), *_ = editor.outputs()
    assert status == "failed" and "plan mode" in out
