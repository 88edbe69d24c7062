"""Issue 22 item 4: /context in a resumed session shows the snapshot its log recorded, in
words (no `instructions: None`), not "this session has no repository snapshot"."""

from __future__ import annotations

import pytest
from pilot_steps import notice_after, ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (100, 30)


def _app(repo, replies, resume=None):
    from m3agent.app.factory import build_session
    from m3agent.app.settings import load_settings
    from m3agent.app.tui.app import create_app
    from m3agent.app.tui.launch import tui_config
    from m3agent.engine.backends.scripted import ScriptedEngine

    settings = load_settings().override(engine="scripted")

    def factory(resume_id, progress):
        # The real factory: a real snapshot of the repository, written to the session log.
        return build_session(settings, cwd=repo, engine=ScriptedEngine(replies), resume=resume_id)

    return create_app(factory, tui_config(settings, cwd=repo, resume=resume))


async def _context_text(pilot, main, until) -> str:
    return await notice_after(pilot, until, "/context")


async def test_context_after_resume_reads_the_logged_snapshot(repo, m3home, until):
    async with _app(repo, ["</mm:think>hi"]).run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "hello")
        await turn_done(pilot, until)
        live = await _context_text(pilot, main, until)
        sid = main.controller.session.id
    assert "files: 2 included" in live
    async with _app(repo, [], resume=sid).run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        text = await _context_text(pilot, main, until)
    assert "no repository snapshot" not in text
    assert text.startswith("repository snapshot: ") and "-token budget" in text
    assert "taken when the session started" in text and "files: 2 included" in text
    assert "None" not in text and "_" not in text
