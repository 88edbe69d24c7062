"""Start-up and shutdown: usable while the engine loads, progress shown, crash logged."""

from __future__ import annotations

import threading

import pytest
from m3agent.app.tui.run import run_tui
from m3agent.app.tui.widgets.loading_view import LoadingView
from m3agent.app.tui.widgets.prompt_input import PromptInput
from m3agent.app.tui.widgets.user_message import UserMessage

pytestmark = pytest.mark.anyio


async def test_window_is_usable_while_the_engine_loads(harness, until):
    release = threading.Event()
    real = harness.session_factory(["Loaded and answering."])

    def slow_factory(resume_id, progress):
        progress("loading weights", 0.25)
        release.wait(10)  # a large checkpoint still loading
        return real(resume_id, progress)

    from m3agent.app.tui.app import create_app

    app = create_app(slow_factory, harness.config())
    async with app.run_test(size=(100, 30)) as pilot:
        main = app.main
        await until(
            pilot, lambda: "loading weights" in str(main.query_one("#loading-label").render())
        )
        assert main.query_one(LoadingView).display
        assert main.status.state == "loading"
        # Typing and sending work at once; the prompt waits for the engine.
        prompt = main.query_one(PromptInput)
        prompt.load_text("hello early")
        await pilot.press("enter")
        assert [str(u.render()) for u in main.query(UserMessage)] == ["hello early"]
        assert not harness.engines  # nothing could reach an engine yet
        release.set()
        await until(pilot, lambda: main.controller.completed_turns >= 1)
        assert not main.query_one(LoadingView).display
        assert harness.engine.requests[0].messages[-1].content == "hello early"
        assert app.first_paint_s is not None and app.first_paint_s < 5


async def test_engine_that_cannot_load_is_reported_in_one_line(harness, until):
    from m3agent.app.tui.app import create_app
    from m3agent.app.tui.widgets.error_view import ErrorView
    from m3agent.engine.api import EngineUnavailable

    def failing(resume_id, progress):
        raise EngineUnavailable("cannot reach http://127.0.0.1:9: connection refused")

    app = create_app(failing, harness.config())
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.main.status.state == "failed")
        text = str(app.main.query_one(ErrorView).render())
        assert "EngineUnavailable: cannot reach http://127.0.0.1:9: connection refused" in text
        prompt = app.main.query_one(PromptInput)
        prompt.load_text("hello?")
        await pilot.press("enter")  # not queued for an engine that will never come
        assert "no engine" in str(app.main.query(ErrorView).last().render())
        assert not app.main.controller.queue


class _BrokenSession:
    """A session object that breaks the app itself (a bug, not an engine failure)."""

    def submit(self, op):
        return None

    async def events(self):
        if False:
            yield None

    @property
    def resumed(self):
        raise RuntimeError("boom in the session object")


def test_crash_restores_the_terminal_and_logs_the_traceback(harness, capsys):
    code = run_tui(lambda resume_id, progress: _BrokenSession(), harness.config(), headless=True)
    assert code == 1
    err = capsys.readouterr().err
    assert "m3agent crashed (RuntimeError: boom in the session object)" in err
    logs = list((harness.home / "logs").glob("crash-*.log"))
    assert len(logs) == 1 and str(logs[0]) in err
    assert "boom in the session object" in logs[0].read_text()
    assert "Traceback" in logs[0].read_text()


async def test_resuming_an_unknown_session_says_so(harness, until):
    app = harness.app([], resume="20200101-000000-abcdef")
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: app.main.status.state == "failed")
        from m3agent.app.tui.widgets.error_view import ErrorView

        text = str(app.main.query_one(ErrorView).render())
        assert "20200101-000000-abcdef" in text
        assert "start m3agent again" in text and "engine is running" not in text


async def test_loading_shows_how_long_each_step_has_taken(harness, until):
    from m3agent.app.tui.app import create_app

    release = threading.Event()
    now = [50.0]
    real = harness.session_factory(["ok"])

    def slow_factory(resume_id, progress):
        progress("loading weights", None)
        release.wait(10)
        return real(resume_id, progress)

    app = create_app(slow_factory, harness.config(clock=lambda: now[0]))
    async with app.run_test(size=(100, 30)) as pilot:
        label = app.main.query_one("#loading-label")
        await until(pilot, lambda: str(label.render()) == "loading weights")
        now[0] += 12.4
        await until(pilot, lambda: str(label.render()) == "loading weights 12s")
        release.set()
        await until(pilot, lambda: app.main.status.state == "ready")
