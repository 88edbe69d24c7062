"""Issue 15 point 1: with nothing configured, bare `m3agent` asks for an engine (a server
probed with GET /v1/models, a model directory, a running `m3agent serve`, the demo) and
writes the config, instead of `ValueError: --engine native needs --model DIR`."""

from __future__ import annotations

import tomllib
from dataclasses import replace

import pytest
from m3agent.app.tui.screens.onboarding_screen import OnboardingScreen
from m3agent.app.tui.widgets.answer_view import AnswerView
from m3agent.app.tui.widgets.notice_view import NoticeView
from m3agent.app.tui.widgets.tool_card import ToolCard
from pilot_steps import ready, send, turn_done

from ...support.models_server import models_server as serve_models

pytestmark = pytest.mark.anyio
SIZE = (100, 30)


@pytest.fixture
def models_server():
    with serve_models([{"id": "m3-test", "object": "model"}]) as url:
        yield url


def _first_run_app(repo):
    from m3agent.app.settings import load_settings
    from m3agent.app.tui.app import create_app
    from m3agent.app.tui.launch import session_factory, setup_port, tui_config
    from m3agent.app.tui.onboarding import needs_setup

    settings = load_settings()
    assert needs_setup(settings, {}, None)  # an empty home: nothing configured
    config = tui_config(settings, cwd=repo, resume=None)
    config = replace(config, setup=setup_port(settings, repo), clock=lambda: 0.0)
    return create_app(session_factory(settings, repo, None), config), settings


async def _pick(pilot, index: int) -> None:
    choices = pilot.app.screen.query_one("#setup-choices")
    choices.focus()
    choices.highlighted = index
    await pilot.press("enter")


async def test_a_server_url_is_probed_and_saved(repo, m3home, models_server, until):
    app, settings = _first_run_app(repo)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, OnboardingScreen))
        await _pick(pilot, 0)
        status = app.screen.query_one("#setup-status")
        field = app.screen.query_one("#setup-input")
        field.value = "http://127.0.0.1:9"  # nothing listens there: said so, nothing saved
        await pilot.press("enter")
        await until(pilot, lambda: "cannot reach" in str(status.render()))
        assert not settings.config_path.exists()
        field.value = models_server  # a bare host: /v1 is tried too
        await pilot.press("enter")
        main = await ready(pilot, until)
        saved = tomllib.loads(settings.config_path.read_text())
        assert saved == {"engine": "remote", "base_url": models_server + "/v1", "model": "m3-test"}
        assert settings.config_path.stat().st_mode & 0o777 == 0o600
        assert main.status.engine == "remote"
        # one copy of the TUI's settings: the screen's helpers see the engine chosen too (the
        # event flow once read a stale copy and showed "native (serve)" when its event came last)
        assert main.config.engine == main.events.config.engine == main.slash.config.engine
        assert main.config.engine == "remote"
        assert any("saved the server" in str(n.render()) for n in main.query(NoticeView))


async def test_a_server_that_wants_a_key_gets_one_typed(repo, m3home, until):
    """Issue 37 item 2: a 401 shows a key field; the key typed there is probed and saved."""
    app, settings = _first_run_app(repo)
    with serve_models([{"id": "m3-test"}], key="sk-typed") as url:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, OnboardingScreen))
            await _pick(pilot, 0)
            status = app.screen.query_one("#setup-status")
            key = app.screen.query_one("#setup-key")
            assert not key.display
            app.screen.query_one("#setup-input").value = url + "/v1"
            await pilot.press("enter")
            await until(pilot, lambda: "wants an API key (HTTP 401)" in str(status.render()))
            assert key.display and key.has_focus and key.password
            key.value = "sk-wrong"
            await pilot.press("enter")
            await until(pilot, lambda: "refused the API key" in str(status.render()))
            assert not settings.config_path.exists()
            key.value = "sk-typed"
            await pilot.press("enter")
            await ready(pilot, until)
    saved = tomllib.loads(settings.config_path.read_text())
    assert saved["api_key"] == "sk-typed" and saved["model"] == "m3-test"


async def test_a_model_directory_is_checked(repo, m3home, tmp_path, until):
    app, settings = _first_run_app(repo)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, OnboardingScreen))
        await _pick(pilot, 1)
        status = app.screen.query_one("#setup-status")
        app.screen.query_one("#setup-input").value = str(ckpt)
        await pilot.press("enter")
        await until(pilot, lambda: "no config.json" in str(status.render()))
        assert not settings.config_path.exists()
        await pilot.press("escape")  # back to the list
        await _pick(pilot, 2)  # no m3agent serve runs here: said so
        await until(pilot, lambda: "No m3agent serve is running" in str(status.render()))


async def test_the_demo_runs_a_turn_and_saves_nothing(repo, m3home, until):
    app, settings = _first_run_app(repo)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, OnboardingScreen))
        await _pick(pilot, 3)
        main = await ready(pilot, until)
        await send(pilot, "hello")
        await turn_done(pilot, until)
        assert main.query_one(ToolCard).status == "ok"  # a real list_dir of the workspace
        assert "scripted demo" in main.query(AnswerView).last().text
        # issue 22 item 2: the second prompt is answered too, not "no reply left"
        await send(pilot, "and now?")
        await turn_done(pilot, until, 2)
        assert "Still the **scripted demo**" in main.query(AnswerView).last().text
        assert not settings.config_path.exists()


def test_a_development_model_is_saved_with_a_max_tokens_bound(repo, m3home, tmp_path):
    """Issue 37 item 6: a random checkpoint (not M3's vocabulary) never stops by itself; the
    first-run screen's check and save (its SetupPort, without loading the model) bound each
    call in the config. M3's own vocabulary saves no bound (the default holds)."""
    from m3agent.app.missing_extra import torch_installed
    from m3agent.app.settings import load_settings

    if not torch_installed():  # found, not imported: the screen refuses a directory without it
        pytest.skip("torch is not installed")
    from m3agent.app.tui.launch import setup_port

    settings = load_settings()
    port = setup_port(settings, repo)
    ckpt = tmp_path / "dev"
    ckpt.mkdir()
    (ckpt / "config.json").write_text('{"text_config": {"vocab_size": 512}}')
    (ckpt / "model.safetensors").write_bytes(b"")
    _factory, said = port.complete(port.check_dir(str(ckpt)))
    saved = tomllib.loads(settings.config_path.read_text())
    assert saved == {"engine": "native", "model": str(ckpt.resolve()), "max_tokens": 256}
    assert "max_tokens = 256" in said
    assert load_settings().max_tokens == 256  # read back as the integer it is
    (ckpt / "config.json").write_text('{"text_config": {"vocab_size": 200064}}')
    assert port.check_dir(str(ckpt)).settings() == {"engine": "native", "model": str(ckpt)}


def test_configured_or_chosen_engines_skip_setup(m3home, tmp_path):
    from m3agent.app.settings import load_settings
    from m3agent.app.tui.onboarding import needs_setup

    settings = load_settings()
    assert not needs_setup(settings, {"engine": "remote"}, None)
    assert not needs_setup(settings, {}, tmp_path / "script.json")
    assert not needs_setup(settings.override(model="/models/m3"), {}, None)
    assert not needs_setup(settings.override(engine="remote"), {}, None)
