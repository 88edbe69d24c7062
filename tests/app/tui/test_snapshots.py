"""Snapshot tests (pytest-textual-snapshot). Deterministic: fixed terminal size, the engine
paused at a fixed delta or reporting fixed usage figures, no clocks or ids on screen.
Update with `pytest tests/app/tui/test_snapshots.py --snapshot-update` and review the SVGs."""

from __future__ import annotations

import time

from m3agent.app.tui.screens.approval_screen import ApprovalScreen
from m3agent.app.tui.widgets.answer_view import AnswerView
from m3agent.app.tui.widgets.prompt_input import PromptInput
from m3agent.app.tui.widgets.reasoning_view import ReasoningView

SIZE = (100, 32)
THINK_ANSWER = (
    "<mm:think>The user wants the sum fixed. calc.py subtracts instead of adding; "
    "one character to change.</mm:think>"
    "The bug is in `add`:\n\n```python\ndef add(a, b):\n    return a - b\n```\n\n"
    "It **subtracts**. Change `-` to `+` and the tests pass."
)


async def _wait(pilot, predicate, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.02)


async def _ready_prompt(pilot) -> PromptInput:
    """Waits for the session, then stops the prompt's cursor blinking (a stable frame)."""
    main = pilot.app.main
    await _wait(pilot, lambda: main.controller.session is not None and main.status.state == "ready")
    prompt = main.query_one(PromptInput)
    prompt.cursor_blink = False
    return prompt


def _prompt_then(text: str, until_fn, settle: float = 0.3):
    async def run_before(pilot) -> None:
        main = pilot.app.main
        prompt = await _ready_prompt(pilot)
        prompt.load_text(text)
        await pilot.press("enter")
        await _wait(pilot, lambda: until_fn(pilot))
        # The Markdown stream renders in the background: wait until it has caught up.
        await _wait(pilot, lambda: all(a.caught_up for a in main.query(AnswerView)))
        await pilot.pause(settle)

    return run_before


def test_main_screen_mid_answer(harness, snap_compare):
    # 7-character chunks: the answer has started and is cut mid-sentence by the pause.
    app = harness.app([THINK_ANSWER], pause_after=30)
    engine_paused = lambda pilot: bool(harness.engines) and harness.engine.paused.is_set()  # noqa: E731
    assert snap_compare(
        app, terminal_size=SIZE, run_before=_prompt_then("why is add wrong?", engine_paused)
    )


def test_approval_modal(harness, snap_compare, m3text):
    app = harness.app(
        [m3text.edit_call("src/calc.py", "a - b", "a + b"), "Fixed."],
        approval="untrusted",
        fixed_usage=True,
    )
    modal = lambda pilot: isinstance(pilot.app.screen, ApprovalScreen)  # noqa: E731
    assert snap_compare(app, terminal_size=SIZE, run_before=_prompt_then("fix add", modal))


def test_reasoning_collapsed_after_the_answer(harness, snap_compare):
    app = harness.app([THINK_ANSWER], fixed_usage=True)
    done = lambda pilot: pilot.app.main.controller.completed_turns >= 1  # noqa: E731
    assert snap_compare(app, terminal_size=SIZE, run_before=_prompt_then("why is add wrong?", done))


def test_reasoning_expanded_on_click(harness, snap_compare):
    app = harness.app([THINK_ANSWER], fixed_usage=True)
    done = lambda pilot: pilot.app.main.controller.completed_turns >= 1  # noqa: E731
    first = _prompt_then("why is add wrong?", done)

    async def run_before(pilot) -> None:
        await first(pilot)
        reasoning = pilot.app.main.query_one(ReasoningView)
        assert reasoning.collapsed
        reasoning.collapsed = False
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_reasoning_open_while_streaming(harness, snap_compare):
    app = harness.app([THINK_ANSWER], pause_after=6)
    engine_paused = lambda pilot: bool(harness.engines) and harness.engine.paused.is_set()  # noqa: E731
    assert snap_compare(
        app, terminal_size=SIZE, run_before=_prompt_then("why is add wrong?", engine_paused)
    )


def test_error_state(harness, snap_compare):
    app = harness.app([])  # no scripted reply: the engine call fails
    done = lambda pilot: pilot.app.main.controller.completed_turns >= 1  # noqa: E731
    assert snap_compare(app, terminal_size=SIZE, run_before=_prompt_then("hello", done))


def test_command_menu_filtered(harness, snap_compare):
    app = harness.app([])

    async def run_before(pilot) -> None:
        prompt = await _ready_prompt(pilot)
        prompt.focus()
        await pilot.press("/", "s")
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_first_run_setup_screen(harness, snap_compare):
    from dataclasses import replace

    from m3agent.app.tui.app import create_app
    from m3agent.app.tui.ports import SetupPort
    from m3agent.app.tui.screens.onboarding_screen import OnboardingScreen

    port = SetupPort(probe=None, check_dir=None, servers=list, complete=None)
    config = replace(harness.config(), setup=port)
    app = create_app(harness.session_factory([]), config)

    async def run_before(pilot) -> None:
        await _wait(pilot, lambda: isinstance(pilot.app.screen, OnboardingScreen))
        await pilot.pause(0.2)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
