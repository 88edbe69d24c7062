"""`m3agent acp` driven by the SDK's own client side (acp.spawn_agent_process) over stdio:
the installed console script, the scripted engine replaying real M3 markup."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

acp = pytest.importorskip("acp")
from acp.schema import (  # noqa: E402
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    FileSystemCapabilities,
    McpServerStdio,
    ReadTextFileResponse,
    RequestPermissionResponse,
    WriteTextFileResponse,
)
from mcp_support import write_server  # noqa: E402

NS = "]<]minimax[>["
EXE = str(Path(sys.executable).parent / "m3agent")


def invoke(name: str, **params: str) -> str:
    body = "".join(f"{NS}<{k}>{v}{NS}</{k}>" for k, v in params.items())
    return f'{NS}<invoke name="{name}">{body}{NS}</invoke>\n'


def calls(*invokes: str, reasoning: str = "", before: str = "") -> str:
    think = f"<mm:think>{reasoning}" if reasoning else ""
    return f"{think}</mm:think>{before}{NS}<tool_call>\n{''.join(invokes)}{NS}</tool_call>"


class Editor:
    """The editor side: records updates, answers permissions, holds unsaved buffers."""

    def __init__(self, buffers: dict[str, str]) -> None:
        self.updates: list = []
        self.permissions: list = []
        self.buffers = buffers
        self.writes: dict[str, str] = {}
        self.answer = "approve"
        self.asked = asyncio.Event()
        self.release: asyncio.Event | None = None

    async def session_update(self, session_id, update, **kw):
        self.updates.append(update)

    async def request_permission(self, session_id, tool_call, options, **kw):
        self.permissions.append((tool_call, [o.option_id for o in options]))
        self.asked.set()
        if self.release is not None:
            await self.release.wait()
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=self.answer)
        )

    async def read_text_file(self, session_id, path, line=None, limit=None, **kw):
        return ReadTextFileResponse(content=self.buffers[path])

    async def write_text_file(self, session_id, path, content, **kw):
        self.writes[path] = content
        return WriteTextFileResponse()

    def kinds(self) -> list[str]:
        return [u.session_update for u in self.updates]


def env(home: Path) -> dict[str, str]:
    e = dict(os.environ)
    e["M3AGENT_HOME"] = str(home)
    e.pop("M3AGENT_CONFIG", None)
    return e


async def _init(conn, fs: bool = True):
    caps = ClientCapabilities(
        fs=FileSystemCapabilities(read_text_file=fs, write_text_file=fs), terminal=False
    )
    return await conn.initialize(protocol_version=acp.PROTOCOL_VERSION, client_capabilities=caps)


def test_acp_session_prompt_permissions_plan_mode_cancel_and_load(repo, home, tmp_path):
    server = write_server(repo)  # inside the workspace: the MCP sandbox lets it read there
    plan = [{"step": "read", "status": "completed"}, {"step": "write", "status": "in_progress"}]
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                # prompt 1: read (through the editor), write (asks), plan, an MCP tool
                calls(
                    invoke("read_file", path="greet.py"),
                    invoke("write_file", path="notes.txt", content="from m3\n"),
                    invoke("update_plan", plan=json.dumps(plan)),
                    invoke("mcp__demo__add", a="2", b="3"),
                    reasoning="Read first.",
                    before="Looking.",
                ),
                "It says EDITOR BUFFER.</mm:think>Done: notes written.",
                # prompt 2 (plan mode): a command is refused without asking
                calls(invoke("shell", command="touch planned.txt")),
                "</mm:think>Plan: rename greet.",
                # prompt 3: the approval is pending when the editor cancels
                calls(invoke("shell", command="touch late.txt")),
                "</mm:think>never sent",
            ]
        )
    )
    # A project hook the user never trusted: the editor is told, with its command line.
    (repo / ".m3agent").mkdir()
    (repo / ".m3agent/settings.json").write_text(
        json.dumps({"hooks": {"Stop": [{"hooks": [{"command": "touch hooked.txt"}]}]}})
    )
    args = ["acp", "--engine", "scripted", "--script", str(script), "--approval", "untrusted"]
    editor = Editor({str(repo / "greet.py"): "EDITOR BUFFER (unsaved)\n"})

    async def main():
        async with acp.spawn_agent_process(editor, EXE, *args, env=env(home), cwd=repo) as (
            conn,
            _proc,
        ):
            init = await _init(conn)
            assert init.agent_capabilities.load_session
            new = await conn.new_session(
                cwd=str(repo),
                mcp_servers=[
                    McpServerStdio(name="demo", command=sys.executable, args=[str(server)], env=[])
                ],
            )
            assert [m.id for m in new.modes.available_modes] == ["default", "plan"]
            sid = new.session_id

            r1 = await conn.prompt(session_id=sid, prompt=[acp.text_block("take notes")])
            assert r1.stop_reason == "end_turn"
            said = "".join(
                u.content.text for u in editor.updates if u.session_update == "agent_message_chunk"
            )
            assert "not trusted" in said and "touch hooked.txt" in said
            assert not (repo / "hooked.txt").exists()
            kinds = editor.kinds()
            for k in (
                "agent_thought_chunk",
                "agent_message_chunk",
                "tool_call",
                "tool_call_update",
                "plan",
            ):
                assert k in kinds, (k, kinds)
            thought = "".join(
                u.content.text for u in editor.updates if u.session_update == "agent_thought_chunk"
            )
            assert thought.startswith("Read first.")
            done = {
                u.tool_call_id: u
                for u in editor.updates
                if u.session_update == "tool_call_update" and u.status
            }
            outputs = [u.raw_output["output"] for u in done.values()]
            assert any("EDITOR BUFFER (unsaved)" in o for o in outputs)  # the editor's buffer
            assert any(o.strip() == "5" for o in outputs), outputs  # the client's MCP server
            assert editor.writes == {str(repo / "notes.txt"): "from m3\n"}
            assert not (repo / "notes.txt").exists()  # the editor wrote it, not us
            asked = [p[0].title for p in editor.permissions]
            assert any(t.startswith("write_file") for t in asked), asked
            plan_upd = [u for u in editor.updates if u.session_update == "plan"][0]
            assert [e.status for e in plan_upd.entries] == ["completed", "in_progress"]

            await conn.set_session_mode(session_id=sid, mode_id="plan")
            n_asked = len(editor.permissions)
            r2 = await conn.prompt(session_id=sid, prompt=[acp.text_block("plan a rename")])
            assert r2.stop_reason == "end_turn"
            assert len(editor.permissions) == n_asked  # refused, never asked
            failed = [
                u
                for u in editor.updates
                if u.session_update == "tool_call_update" and u.status == "failed"
            ]
            assert "plan mode" in failed[-1].raw_output["output"]
            assert not (repo / "planned.txt").exists()

            await conn.set_session_mode(session_id=sid, mode_id="default")
            editor.asked.clear()
            editor.release = asyncio.Event()
            pending = asyncio.ensure_future(
                conn.prompt(session_id=sid, prompt=[acp.text_block("make a file")])
            )
            await asyncio.wait_for(editor.asked.wait(), 30)
            await conn.cancel(session_id=sid)
            r3 = await asyncio.wait_for(pending, 30)
            editor.release.set()
            assert r3.stop_reason == "cancelled"
            assert not (repo / "late.txt").exists()
            return sid

    sid = asyncio.run(main())

    # A new editor process loads the session: the conversation is replayed to it.
    again = Editor({})

    async def load():
        async with acp.spawn_agent_process(again, EXE, *args, env=env(home), cwd=repo) as (
            conn,
            _proc,
        ):
            await _init(conn, fs=False)
            await conn.load_session(cwd=str(repo), session_id=sid, mcp_servers=[])
            users = [
                u.content.text for u in again.updates if u.session_update == "user_message_chunk"
            ]
            assert users[0] == "take notes" and users[1].endswith("plan a rename")
            answers = "".join(
                u.content.text for u in again.updates if u.session_update == "agent_message_chunk"
            )
            assert "Done: notes written." in answers

    asyncio.run(load())


@pytest.mark.slow
def test_acp_on_the_tiny_native_model(repo, home, tmp_path):
    """The real engine behind the editor: a random tiny M3 (it speaks nonsense) streams its
    answer as agent_message_chunk updates and the prompt ends with a stop reason."""
    pytest.importorskip("torch")
    import subprocess

    model = tmp_path / "tiny"
    subprocess.run(
        [EXE, "model", "init-tiny", str(model), "--layers", "2"],
        check=True,
        env=env(home),
        capture_output=True,
    )
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('max_tokens = 6\nwarm = false\nthinking = "disabled"\n')
    editor = Editor({})
    args = ["acp", "--engine", "native", "--model", str(model), "--no-context"]

    async def main():
        async with acp.spawn_agent_process(editor, EXE, *args, env=env(home), cwd=repo) as (
            conn,
            _proc,
        ):
            await _init(conn, fs=False)
            new = await conn.new_session(cwd=str(repo), mcp_servers=[])
            r = await conn.prompt(session_id=new.session_id, prompt=[acp.text_block("hi")])
            assert r.stop_reason in ("end_turn", "max_turn_requests")
            return new.session_id

    sid = asyncio.run(main())
    from m3agent.agent.conversation import Conversation

    log = Conversation.load(home / "sessions", sid)
    assert [m.role for m in log.messages][-2] == "user"  # the prompt, then the model's reply
    assert log.messages[-1].role in ("assistant", "tool")


def test_acp_with_nothing_configured_answers_the_handshake_and_says_why(repo, home):
    """Issue 37 item 3: the README's Zed snippet on a fresh install (no engine, no model) is a
    live agent: initialize answers, and session/new answers the missing configuration as an
    ACP error (the editor shows it) instead of a process that exited 3 before the handshake."""

    async def main():
        async with acp.spawn_agent_process(Editor({}), EXE, "acp", env=env(home), cwd=repo) as (
            conn,
            proc,
        ):
            init = await _init(conn)
            assert init.agent_info.name == "m3agent"
            with pytest.raises(acp.RequestError) as refused:
                await conn.new_session(cwd=str(repo), mcp_servers=[])
            assert proc.returncode is None  # still serving: the editor may retry
            return refused.value

    error = asyncio.run(main())
    assert str(error).startswith("m3agent has no model: --engine native needs --model DIR")
    assert "running `m3agent` once in a terminal" in str(error)


def test_an_editor_read_of_a_hard_link_is_refused(tmp_path):
    """Issue 36, round 5: read_file served by the editor (fs/read_text_file) skipped the
    file tools' hard-link check, so `backup.ini` linked to a credentials file outside the
    workspace reached the model through an editor that reads files from disk. Control: the
    same file with one name is read through the editor."""
    import asyncio
    import threading

    from m3agent.app.acp.editor_tools import EditorToolset
    from m3agent.tools.base import ToolContext
    from m3agent.tools.toolset import default_toolset

    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "credentials").write_text("aws_secret_access_key = AKIA-SECRET-5\n")
    os.link(outside / "credentials", ws / "backup.ini")
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()

    async def editor(method: str, path: str, **fields: object) -> str:
        return Path(path).read_text()  # a file not open in the editor: read from disk

    tools = EditorToolset(default_toolset(), loop, editor, can_read=True, can_write=False)
    try:
        r = tools.dispatch("read_file", {"path": "backup.ini"}, ToolContext(cwd=ws))
        assert r.is_error and "hard links" in r.output and "AKIA" not in r.output
        (ws / "plain.ini").write_text("key = visible\n")
        r = tools.dispatch("read_file", {"path": "plain.ini"}, ToolContext(cwd=ws))
        assert not r.is_error and "key = visible" in r.output and r.metadata["via"] == "editor"
    finally:
        loop.call_soon_threadsafe(loop.stop)
