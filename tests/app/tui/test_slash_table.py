"""Every slash command has exactly one handler, found once in a table (slash_actions.py)
rather than looked up by name on each use; a helper that adds a handler for no command, or a
second one for a command, is refused when the table is built."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from m3agent.app.slash import NAMES
from m3agent.app.tui import slash_daily
from m3agent.app.tui.slash_actions import SlashActions


def _actions() -> SlashActions:
    controller = SimpleNamespace(config=SimpleNamespace())
    return SlashActions(controller, None, None, None)  # type: ignore[arg-type]


def test_every_command_has_one_handler() -> None:
    handlers = _actions().handlers
    assert sorted(handlers) == sorted(NAMES)
    assert all(callable(h) for h in handlers.values())


def test_a_handler_for_no_command_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def do_nothing_here(self: object, arg: str) -> None: ...

    monkeypatch.setattr(slash_daily.DailyActions, "do_frobnicate", do_nothing_here, raising=False)
    with pytest.raises(RuntimeError, match="for no command \\['frobnicate'\\]"):
        _ = _actions().handlers


def test_two_handlers_for_one_command_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    async def do_think(self: object, arg: str) -> None: ...

    monkeypatch.setattr(slash_daily.DailyActions, "do_think", do_think, raising=False)
    with pytest.raises(RuntimeError, match="/think is handled by two helpers"):
        _ = _actions().handlers
