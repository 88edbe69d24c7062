"""/export and /fork (Pilot over the CLI's session factory, one engine for every session):
the session written as Markdown and JSON, never replacing a file unasked; a fork goes on from
the same conversation (its next prompt starts with the original's, message for message) while
the original stays resumable, and both are listed."""

from __future__ import annotations

import json

import pytest
from m3agent.agent.conversation import Conversation
from m3agent.agent.session_index import list_sessions
from m3agent.app.tui.launch import list_sessions as browsed_sessions
from m3agent.app.tui.screens.confirm_screen import ConfirmScreen
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.app.tui.widgets.notice_view import NoticeView
from pilot_steps import ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (110, 34)


def _last_notice(main) -> str:
    return str(main.query(NoticeView).last().render())


async def test_export_writes_markdown_and_json_and_asks_before_replacing(harness, until, m3text):
    reply = m3text.read_call("README.md")
    app = harness.factory_app(
        ["<mm:think>Reading it.</mm:think>" + reply, "</mm:think>It says **demo**."]
    )
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "what does the README say?")
        await turn_done(pilot, until)
        sid = main.controller.session.id
        await send(pilot, "/export")
        md, js = (harness.repo / f"m3agent-{sid}{s}" for s in (".md", ".json"))
        await until(pilot, lambda: _last_notice(main).startswith("exported to"))
        text = md.read_text()
        assert text.startswith(f"# m3agent session {sid}\n")
        assert "## User\n\nwhat does the README say?" in text
        assert "<summary>Reasoning</summary>\n\nReading it." in text
        assert '**Tool call** `read_file`:\n\n```json\n{\n "path": "README.md"\n}' in text
        assert "**Result** of `read_file`:" in text and "# demo" in text
        assert text.rstrip().endswith("It says **demo**.")
        data = json.loads(js.read_text())
        assert data["session"]["id"] == sid and data["v"] == 1
        assert [m["role"] for m in data["messages"]][-4:] == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ]

        md.write_text("mine")  # /export again: asked, and No keeps the file
        await send(pilot, "/export")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("n")
        await until(pilot, lambda: "nothing was written" in _last_notice(main))
        assert md.read_text() == "mine"
        await send(pilot, f"/export {md.name}")  # one file; yes replaces it
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await until(pilot, lambda: _last_notice(main) == f"exported to {md}")
        assert md.read_text() == text

        await send(pilot, "/export notes.txt")
        await until(pilot, lambda: bool(main.query(ErrorView)))
        assert "usage: /export [FILE.md | FILE.json | DIR]" in str(
            main.query(ErrorView).last().render()
        )


async def test_fork_goes_on_from_the_same_prefix(harness, until, m3home):
    app = harness.factory_app(["</mm:think>one", "</mm:think>two", "</mm:think>three"])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "first")
        await turn_done(pilot, until)
        original = main.controller.session
        before = original.messages
        await send(pilot, "/fork")
        await until(
            pilot,
            lambda: (
                main.controller.session is not None
                and main.controller.session.id != original.id
                and main.status.state == "ready"
            ),
        )
        fork = main.controller.session
        assert fork.messages == before  # the whole conversation, as it was
        await send(pilot, "second")
        await turn_done(pilot, until, 2)
        first, sent = (
            r.messages for r in (harness.engine.requests[0], harness.engine.requests[-1])
        )
        # the fork's prompt starts with the original's first prompt, then its answer: the
        # same prefix, token for token, so the engine's prefix cache serves it
        assert len(harness.engine.requests) == 2 and tuple(sent[: len(first)]) == tuple(first)
        assert sent[len(first)].content == "one" and sent[-1].content == "second"

    sessions = m3home / "sessions"
    assert Conversation.load(sessions, original.id).messages == before  # left as it was
    listed = {s.id: s for s in list_sessions(sessions)}
    assert listed[fork.id].forked_from == original.id and listed[original.id].forked_from == ""
    titles = {s.session_id: s.title for s in browsed_sessions(sessions)}  # /sessions' list
    assert titles == {original.id: "first", fork.id: "first (fork)"}
    assert Conversation.load(sessions, fork.id).last_sequence_tokens() is not None
