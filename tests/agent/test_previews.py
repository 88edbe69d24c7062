"""Approval requests carry the tool's own preview (Tool.preview), end to end through a Session
driven by a scripted engine that writes real M3 tool-call markup; the headless prompt shows it.
"""

from __future__ import annotations

import io
import json
import sys

import pytest
from m3agent.agent import events as ev
from m3agent.agent.config import AgentConfig
from m3agent.agent.conversation import session_log_path
from m3agent.agent.ops import ApprovalDecision, Decision, UserTurn
from m3agent.agent.session import Session
from m3agent.app.headless import make_renderer, run_headless
from m3agent.app.headless_approvals import tty_approver
from m3agent.engine.backends.scripted import ScriptedEngine
from m3agent.tools.base import PreviewKind
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.report import SandboxReport
from m3agent.tools.sandbox.runner import Sandbox
from m3agent.tools.toolset import default_toolset

PATCH = (
    "*** Begin Patch\n*** Add File: docs/notes.md\n+# notes\n+adds, never subtracts\n*** End Patch"
)


def _session(home, repo, script, policy="untrusted", sandbox=None, **cfg) -> Session:
    return Session.create(
        ScriptedEngine(script),
        default_toolset(use_ripgrep=False),
        AgentConfig(thinking_default="enabled", approval_policy=policy, **cfg),
        sessions_dir=home / "sessions",
        cwd=repo,
        sandbox=sandbox,
    )


def _no_probe_sandbox(repo, mode="workspace-write") -> Sandbox:
    policy = SandboxPolicy(workspace=repo, mode=mode)
    return Sandbox(policy, SandboxReport(policy.mode.value, False, ()))


def test_each_approval_carries_the_diff_the_call_then_makes(home, repo, m3):
    script = [
        m3.calls(
            m3.invoke("edit_file", path="calc.py", old_string="a - b", new_string="a + b"),
            m3.invoke("write_file", path="README.md", content="# calc\n"),
            m3.invoke("apply_patch", patch=PATCH),
            m3.invoke("shell", command="rm -rf docs"),
        ),
        m3.answer("done"),
    ]
    asked: list[tuple[ev.ApprovalRequest, str, bool]] = []

    async def go():
        s = _session(home, repo, script)

        async def on(sess, e):
            if isinstance(e, ev.ApprovalRequest):
                # What the workspace looks like while the user decides: nothing written yet.
                asked.append((e, (repo / "calc.py").read_text(), (repo / "README.md").exists()))
                shell = e.name == "shell"
                sess.submit(
                    ApprovalDecision(e.call_id, Decision.DENY if shell else "approve", "not that")
                )

        seen, done = await m3.drive(s, "fix and document", on_event=on)
        await s.close()
        return s, seen, done

    s, seen, done = m3.run(go())
    assert done.reason == "done"
    finished = {e.call_id: e for e in seen if isinstance(e, ev.ToolCallFinished)}
    assert [a.name for a, _, _ in asked] == ["edit_file", "write_file", "apply_patch", "shell"]
    for req, _, _ in asked[:3]:
        assert req.preview is not None and req.preview.kind is PreviewKind.DIFF
        assert not req.preview.is_error
        assert req.preview.text == finished[req.call_id].metadata["diff"]  # byte for byte
        assert req.diff == req.preview.text
    assert asked[0][1] == "def add(a, b):\n    return a - b\n"  # unedited while asked
    assert asked[1][2] is False  # README not yet written while asked
    shell = asked[3][0]
    assert shell.preview.kind is PreviewKind.COMMAND and shell.diff is None
    assert shell.preview.text == f"cwd: {repo} (timeout 120s)\n$ rm -rf docs\n"
    assert (repo / "docs" / "notes.md").exists()  # the shell call was denied

    # The stream-json form and the session log on disk carry the same preview.
    assert asked[0][0].to_dict()["preview"] == {
        "kind": "diff",
        "text": asked[0][0].preview.text,
        "note": "",
        "is_error": False,
    }
    log = session_log_path(home / "sessions", s.id).read_text().splitlines()
    logged = [json.loads(x)["event"] for x in log if '"approval_request"' in x]
    assert [e["preview"]["kind"] for e in logged] == ["diff", "diff", "diff", "command"]


def test_on_request_asks_before_a_declared_write_the_sandbox_refuses(home, repo, m3):
    script = [
        m3.calls(
            m3.invoke("write_file", path="inside.txt", content="ok\n"),
            m3.invoke("write_file", path="../escape.txt", content="out\n"),
        ),
        m3.answer("done"),
    ]
    asked = []

    async def go():
        s = _session(home, repo, script, policy="on-request", sandbox=_no_probe_sandbox(repo))

        await m3.drive(s, "write", on_event=m3.answering("deny", asked))
        await s.close()

    m3.run(go())
    assert [a.arguments["path"] for a in asked] == ["../escape.txt"]  # inside: not asked
    assert asked[0].reason == "the sandbox would block write_file"
    assert asked[0].preview.is_error and "outside the writable roots" in asked[0].preview.text
    assert (repo / "inside.txt").read_text() == "ok\n"
    assert not (repo.parent / "escape.txt").exists()


def test_read_only_sandbox_asks_before_a_patch(home, repo, m3):
    script = [m3.calls(m3.invoke("apply_patch", patch=PATCH)), m3.answer("done")]
    asked = []

    async def go():
        s = _session(
            home, repo, script, policy="on-request", sandbox=_no_probe_sandbox(repo, "read-only")
        )

        await m3.drive(s, "patch", on_event=m3.answering("deny", asked))
        await s.close()

    m3.run(go())
    assert [a.name for a in asked] == ["apply_patch"]
    assert asked[0].preview.is_error and "read-only" in asked[0].preview.text


def _headless(home, repo, script, answers: str, monkeypatch, **cfg) -> tuple[int, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(answers))
    out, err = io.StringIO(), io.StringIO()

    async def go():
        s = _session(home, repo, script, **cfg)
        return await run_headless(
            s, UserTurn("go"), make_renderer("text", out, err), tty_approver(err)
        )

    import asyncio

    return asyncio.run(go()), err.getvalue()


def test_headless_prompt_shows_the_preview(home, repo, m3, monkeypatch):
    script = [
        m3.calls(m3.invoke("edit_file", path="calc.py", old_string="a - b", new_string="a + b")),
        m3.answer("fixed"),
    ]
    code, err = _headless(home, repo, script, "y\n", monkeypatch)
    assert code == 0
    assert "Approve edit_file" in err
    assert "--- a/calc.py\n+++ b/calc.py\n" in err and "+    return a + b\n" in err
    assert err.index("+    return a + b") < err.index("[y]es")  # shown before the question
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_headless_prompt_is_bounded_and_says_what_it_cut(home, repo, m3, monkeypatch):
    (repo / "big.txt").write_text("".join(f"row {i}\n" for i in range(500)))
    script = [m3.calls(m3.invoke("write_file", path="big.txt", content="new\n")), m3.answer("ok")]
    code, err = _headless(home, repo, script, "n\n", monkeypatch)
    prompt = err[err.index("Approve write_file") : err.index("[y]es")]
    assert "-row 0\n" in prompt and "-row 100\n" not in prompt
    assert "[diff cut: showing 60 of 504 lines" in prompt
    assert "nothing is changed until the call runs" in prompt
    assert (repo / "big.txt").read_text().startswith("row 0\n")  # denied: untouched


def test_a_failing_call_is_previewed_as_failing_in_the_prompt(home, repo, m3, monkeypatch):
    script = [
        m3.calls(m3.invoke("edit_file", path="calc.py", old_string="a * b", new_string="q")),
        m3.answer("ok"),
    ]
    _, err = _headless(home, repo, script, "n\n", monkeypatch)
    assert "this call would fail: calc.py: old_string not found" in err


def test_a_misspelt_decision_fails_where_it_is_made():
    with pytest.raises(ValueError):
        ApprovalDecision("c1", "aprove")
    d = ApprovalDecision("c1", "approve_session")
    assert d.decision is Decision.APPROVE_SESSION and d.decision == "approve_session"


def test_shell_preview_shows_the_timeout_the_call_gets(home, repo, m3, monkeypatch):
    script = [m3.calls(m3.invoke("shell", command="make test")), m3.answer("ok")]
    _, err = _headless(home, repo, script, "n\n", monkeypatch, tool_timeout_s=7)
    assert f"cwd: {repo} (timeout 7s)\n$ make test\n" in err


def test_a_preview_cannot_drive_the_terminal(home, repo, m3, monkeypatch):
    """The diff quotes the repository and the model: escapes in it are spelled out."""
    (repo / "evil.txt").write_text("title\n")
    script = [
        m3.calls(m3.invoke("write_file", path="evil.txt", content="\x1b]0;pwned\x07\x1b[2J\n")),
        m3.answer("ok"),
    ]
    _, err = _headless(home, repo, script, "n\n", monkeypatch)
    assert "\x1b" not in err and "\x07" not in err
    assert "+\\x1b]0;pwned" in err


def test_stream_json_carries_the_preview(home, repo, m3):
    import asyncio

    from m3agent.app.headless_approvals import deny_approver

    script = [
        m3.calls(m3.invoke("edit_file", path="calc.py", old_string="a - b", new_string="a + b")),
        m3.answer("left it"),
    ]
    out = io.StringIO()

    async def go():
        s = _session(home, repo, script)
        return await run_headless(
            s, UserTurn("go"), make_renderer("stream-json", out), deny_approver("read-only review")
        )

    asyncio.run(go())
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    req = next(x for x in lines if x["type"] == "approval_request")
    assert req["preview"]["kind"] == "diff" and req["preview"]["is_error"] is False
    assert "-    return a - b\n+    return a + b\n" in req["preview"]["text"]
    assert req["diff"] == req["preview"]["text"]


def test_the_tui_modal_shows_a_command_preview_and_a_failure(tmp_path):
    """The approval modal renders the request's preview: no diff of its own (Pilot)."""
    import asyncio

    from m3agent.app.tui.screens.approval_screen import ApprovalScreen
    from m3agent.tools.base import Preview
    from textual.app import App

    shell = ev.ApprovalRequest(
        "c1",
        "shell",
        {"command": "make"},
        reason="asks",
        preview=Preview(
            PreviewKind.COMMAND, "cwd: /w (timeout 9s)\n$ make\n", note="[command cut: ...]"
        ),
    )
    failing = ev.ApprovalRequest(
        "c2",
        "edit_file",
        {"path": "x"},
        preview=Preview(PreviewKind.TEXT, "x: no such file", is_error=True),
    )

    async def go():
        shown = []
        for req in (shell, failing):
            app = App()
            async with app.run_test() as pilot:
                app.push_screen(ApprovalScreen(req))
                await pilot.pause()
                screen = app.screen
                assert not screen.query("#approval-diff")
                text = str(screen.query_one("#approval-preview").render())
                notes = [str(n.render()) for n in screen.query("#approval-preview-note")]
                shown.append((text, notes))
        return shown

    (cmd, cmd_notes), (fail, _) = asyncio.run(go())
    assert "$ make" in cmd and "timeout 9s" in cmd and cmd_notes == ["[command cut: ...]"]
    assert fail == "this call would fail: x: no such file"


def test_a_tool_whose_touches_fails_is_not_run(home, repo, m3):
    """Fail closed: a declaration that cannot be read never lets the call through."""
    from m3agent.tools.base import Tool, ToolResult
    from m3agent.tools.toolset import Toolset
    from pydantic import BaseModel

    ran = []

    class A(BaseModel):
        x: str

    class Broken(Tool[A]):
        name = "broken"
        description = "declares badly"
        mutates = True

        def touches(self, args):
            raise RuntimeError("bug")

        def run(self, args, ctx):
            ran.append(args.x)
            return ToolResult("ran")

    script = [m3.calls(m3.invoke("broken", x="1")), m3.answer("ok")]

    _, seen, done = m3.one_turn(home, repo, script, "go", toolset=Toolset([Broken()]))
    assert done.reason == "done" and ran == []
    out = next(e for e in seen if isinstance(e, ev.ToolCallFinished))
    assert out.is_error and "cannot tell what broken would touch (RuntimeError: bug)" in out.output
