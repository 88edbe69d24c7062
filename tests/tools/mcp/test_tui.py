"""The TUI over a session with a real MCP server (the CLI's own session factory): /mcp lists
the server, its state and tools; an MCP call shows its card like any tool."""

from __future__ import annotations

import json
import time

import pytest
from m3agent.app.settings import load_settings
from mcp_support import answer, calls, invoke

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _until(pilot, predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.05)


def _app(settings, repo, tmp_path, *replies):
    """The TUI app as the CLI builds it, over a scripted engine that gives `replies`."""
    from m3agent.app.tui.app import create_app
    from m3agent.app.tui.launch import session_factory, tui_config

    script = tmp_path / "script.json"
    script.write_text(json.dumps(list(replies)))
    return create_app(
        session_factory(settings, repo, script), tui_config(settings, cwd=repo, resume=None)
    )


def _add_app(repo, tmp_path):
    """The app whose model calls mcp__demo__add(3, 4), then answers 7."""
    return _app(
        load_settings(), repo, tmp_path, calls(invoke("mcp__demo__add", a=3, b=4)), answer("7")
    )


async def _ready(pilot, main) -> None:
    """Until the session is built and the status line says ready."""
    await _until(
        pilot, lambda: main.controller.session is not None and main.status.state == "ready"
    )


async def test_slash_mcp_lists_servers_state_and_tools(
    home, repo, server, tmp_path, user_config, stdio_config
):
    from m3agent.app.tui.widgets.notice_view import NoticeView
    from m3agent.app.tui.widgets.tool_card import ToolCard
    from pilot_steps import send

    user_config(
        'engine = "scripted"\napproval = "never"\n'
        + stdio_config("demo", server)
        + '[mcp_servers.ghost]\ncommand = "/no/such/server"\n'
    )
    app = _add_app(repo, tmp_path)
    async with app.run_test(size=(110, 50)) as pilot:
        main = app.main
        await _ready(pilot, main)
        await send(pilot, "add")
        await _until(pilot, lambda: main.controller.completed_turns >= 1)
        await send(pilot, "/mcp")
        await pilot.pause(0.2)
        notices = "\n".join(str(n.render()) for n in main.query(NoticeView))
        assert "demo  ready" in notices and "tools: add, pic, photo, big_photo, grow" in notices
        assert "ghost  failed: " in notices and "No such file or directory" in notices
        assert "/mcp reload" in notices
        (card,) = main.query(ToolCard)
        assert card.tool_name == "mcp__demo__add" and card.status == "ok"
        await app.shutdown()


async def test_s_in_the_approval_modal_saves_an_always_allow(
    home, repo, server, tmp_path, user_config, stdio_config
):
    from m3agent.app.tui.screens.approval_screen import ApprovalScreen
    from pilot_steps import send

    user_config('engine = "scripted"\n' + stdio_config("demo", server))
    app = _add_app(repo, tmp_path)
    async with app.run_test(size=(110, 50)) as pilot:
        main = app.main
        await _ready(pilot, main)
        await send(pilot, "add")
        await _until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        await pilot.press("s")
        await _until(pilot, lambda: main.controller.completed_turns >= 1)
        await app.shutdown()
    assert json.loads((home / "permissions.json").read_text())["allow"] == ["mcp__demo__add"]
    assert load_settings().agent_config().rules[-1].tool == "mcp__demo__add"


async def test_mcp_reload_says_what_it_recomputes_and_acts_only_on_yes(
    home, repo, server, tmp_path, user_config, stdio_config
):
    from m3agent.app.tui.widgets.notice_view import NoticeView
    from pilot_steps import send

    user_config('engine = "scripted"\napproval = "never"\n' + stdio_config("demo", server))
    app = _app(
        load_settings(),
        repo,
        tmp_path,
        answer("hello"),
        calls(invoke("mcp__two__add", a=1, b=1)),
        answer("2"),
    )
    async with app.run_test(size=(110, 50)) as pilot:
        main = app.main
        await _ready(pilot, main)
        session = main.controller.session
        await send(pilot, "hi")
        await _until(pilot, lambda: main.controller.completed_turns >= 1)
        # A server added to the config while the session runs: not applied by itself.
        user_config(
            'engine = "scripted"\napproval = "never"\n'
            + stdio_config("demo", server)
            + stdio_config("two", server)
        )
        await send(pilot, "/mcp reload")
        await pilot.pause(0.5)
        notices = "\n".join(str(n.render()) for n in main.query(NoticeView))
        assert "MCP reload would add two" in notices and "recomputes it all" in notices
        assert "/mcp reload yes" in notices
        assert "mcp__two__add" not in session.toolset.names()
        await send(pilot, "/mcp reload yes")
        await _until(pilot, lambda: "mcp__two__add" in session.toolset.names())
        await send(pilot, "add")
        await _until(pilot, lambda: main.controller.completed_turns >= 2)
        await app.shutdown()
    done = [m for m in session.messages if m.role == "tool"]
    assert done[-1].name == "mcp__two__add" and done[-1].content.startswith("2")
    first, second = session.engine.prompt_token_ids[:2]
    assert second[: len(first)] != first  # the tool block changed: the prompt was recomputed
    assert session.cache.history[1].cache_miss_reason == "tools changed"
