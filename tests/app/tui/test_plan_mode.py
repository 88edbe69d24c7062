"""Plan mode: shift+Tab cycles default / accept edits / plan; in plan mode the tools that
change something are denied, the model answers with a plan, the user acts on it (or edits
it), and the session goes on acting, with every earlier prompt byte unchanged (the tool
schemas stay; the instruction rides on the user message)."""

from __future__ import annotations

import pytest
from m3agent.app.tui.screens.plan_screen import PlanScreen
from m3agent.app.tui.widgets.prompt_input import PromptInput
from m3agent.app.tui.widgets.tool_card import ToolCard
from pilot_steps import ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (110, 34)


def _app(harness, replies, approval="on-request"):
    return harness.factory_app(replies, approval=approval), harness.engine


async def _answer_the_plan(pilot, until, key: str):
    """Plan mode (shift+tab twice), a prompt, the plan dialog answered with KEY; back on the
    main screen."""
    main = await ready(pilot, until)
    await pilot.press("shift+tab", "shift+tab")
    await send(pilot, "plan it")
    await until(pilot, lambda: isinstance(pilot.app.screen, PlanScreen))
    await pilot.press(key)
    await until(pilot, lambda: pilot.app.screen is main)
    return main


async def test_plan_then_act(harness, until, m3text, m3home):
    edit = m3text.edit_call("src/calc.py", "a - b", "a + b")
    plan = "</mm:think>1. In src/calc.py, make add return a + b.\n2. Run it."
    app, engine = _app(harness, [edit, plan, edit, "</mm:think>done"])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await pilot.press("shift+tab")
        assert main.controller.mode == "acceptEdits" and "accept edits" in main.status.render()
        await pilot.press("shift+tab")
        assert main.controller.mode == "plan" and " plan " in main.status.render()
        await send(pilot, "fix add")
        await until(pilot, lambda: isinstance(app.screen, PlanScreen))
        # the edit was denied in plan mode: the file is as it was
        assert (harness.repo / "src/calc.py").read_text().endswith("a - b\n")
        assert main.query(ToolCard).first().status in ("denied", "error")
        first = engine.requests[0]
        assert "<plan_mode>" in [m for m in first.messages if m.role == "user"][-1].content
        await pilot.press("y")  # act on it
        await turn_done(pilot, until, 2)
        assert main.controller.mode == "default" and " plan " not in main.status.render()
    assert (harness.repo / "src/calc.py").read_text().endswith("a + b\n")
    last = engine.requests[-1]
    assert last.tools == first.tools  # the same schemas: no rewritten prefix
    assert list(last.messages[: len(first.messages)]) == list(first.messages)
    acted = [m for m in last.messages if m.role == "user"][-1].content
    assert acted.startswith("The plan is approved") and "<plan_mode>" not in acted


async def test_edit_the_plan_first(harness, until, m3home):
    app, _ = _app(harness, ["</mm:think>1. Do the thing."])
    async with app.run_test(size=SIZE) as pilot:
        main = await _answer_the_plan(pilot, until, "e")
        text = main.query_one(PromptInput).text
        assert text == "Carry out this plan:\n1. Do the thing."
        assert main.controller.mode == "default"


async def test_keep_planning_and_default_has_no_dialog(harness, until, m3home):
    app, _ = _app(harness, ["</mm:think>1. A plan.", "</mm:think>an answer"])
    async with app.run_test(size=SIZE) as pilot:
        main = await _answer_the_plan(pilot, until, "n")
        assert main.controller.mode == "plan"
        await pilot.press("shift+tab")  # back to default: answers get no plan dialog
        await send(pilot, "just answer")
        await turn_done(pilot, until, 2)
        await pilot.pause(0.1)
        assert app.screen is main


async def test_plan_mode_binds_a_task_child(harness, until, m3home):
    """Issue 36, class 6: shift+Tab's plan mode is the session gate's, so a `task` child
    (whose gate was built from the config before) can neither write nor run a command. The
    control is test_plan_then_act's own default-mode turn, where the same edit goes through."""
    from ...support.markup import answer, calls, invoke

    replies = [
        calls(invoke("task", description="fix", prompt="make add right")),
        calls(
            invoke("edit_file", path="src/calc.py", old_string="a - b", new_string="a + b"),
            invoke("shell", command="touch ran"),
        ),
        answer("child: done"),
        answer("1. A plan."),
    ]
    app, _ = _app(harness, replies, approval="never")  # nothing is asked: only the mode stops it
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await pilot.press("shift+tab", "shift+tab")
        assert main.controller.mode == "plan"
        await send(pilot, "plan it")
        await until(pilot, lambda: isinstance(pilot.app.screen, PlanScreen))
    assert (harness.repo / "src/calc.py").read_text().endswith("a - b\n")
    assert not (harness.repo / "ran").exists()
