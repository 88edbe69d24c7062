"""Issue 15 point 6: the TUI habits Claude Code and Codex users bring (Pilot, a real Session
and the real ScriptedEngine): the `/` menu, Tab that stays in the prompt, scrolling keys,
`/think` alone, `/attach` checked at once, the turn timer, command-prefix approvals, and tool
results shown failed or not from the session log when resumed."""

from __future__ import annotations

import pytest
from m3agent.app.tui.screens.approval_screen import ApprovalScreen
from m3agent.app.tui.widgets.activity_line import ActivityLine
from m3agent.app.tui.widgets.command_menu import CommandMenu
from m3agent.app.tui.widgets.conversation_view import ConversationView
from m3agent.app.tui.widgets.error_view import ErrorView
from m3agent.app.tui.widgets.prompt_input import PromptInput
from m3agent.app.tui.widgets.tool_card import ToolCard
from m3agent.app.tui.widgets.user_message import UserMessage
from PIL import Image
from pilot_steps import at_approval, notice_after, ready, send, turn_done

SIZE = (100, 30)
pytestmark = pytest.mark.anyio


async def test_slash_opens_a_filtered_menu_tab_completes_enter_runs(harness, until):
    app = harness.app([])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        menu, prompt = main.query_one(CommandMenu), main.query_one(PromptInput)
        prompt.focus()
        await pilot.press("/")
        from m3agent.app.slash import COMMANDS

        assert menu.display and len(menu.matches) == len(COMMANDS)  # all of them
        await pilot.press("t", "h")
        assert [m.name for m in menu.matches] == ["think"]
        await pilot.press("tab")  # completes, keeps the focus, waits for the argument
        assert prompt.text == "/think " and app.focused is prompt and not menu.display
        await pilot.press(*"enabled", "enter")
        assert "think enabled" in main.status.render()
        await pilot.press("/", "d")  # diff, undo... "d" first: names starting with it
        assert menu.selected.name == "diff"
        await pilot.press("down")
        assert menu.selected.name != "diff"
        await pilot.press("escape")
        assert not menu.display and prompt.text == "/d"
        prompt.load_text("")
        # no argument: Enter runs it at once
        shown = await notice_after(pilot, until, keys=("/", "h", "e", "enter"))
        assert "Commands:" in shown
        assert prompt.text == ""


async def test_enter_right_after_fast_typing_sends_the_arguments(harness, until):
    """The menu follows the text through TextArea.Changed; a key typed before that message is
    handled (fast typing, a paste, tmux send-keys) must not meet a stale menu: Enter sends
    "/think disabled", it does not take the menu's "/think" and drop the argument."""
    from textual import events

    app = harness.app([])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        menu, prompt = main.query_one(CommandMenu), main.query_one(PromptInput)
        prompt.focus()
        await pilot.press("/", "t", "h")
        assert [m.name for m in menu.matches] == ["think"] and menu.selected.runs_alone
        prompt.insert("ink disabled")  # its Changed message is queued, not yet handled
        assert menu.open  # the stale state the race leaves
        await prompt.on_key(events.Key("enter", None))
        await pilot.pause(0.05)
        assert "think disabled" in main.status.render()  # the menu's "/think" alone: enabled
        assert prompt.text == ""


async def test_tab_never_leaves_the_prompt_and_later_keys_arrive(harness, until):
    app = harness.app(["Hello back."])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        prompt = main.query_one(PromptInput)
        prompt.focus()
        await pilot.press(*"hel", "tab", *"lo @sr", "tab")
        assert app.focused is prompt
        assert prompt.text == "hello @src/"  # nothing to complete: Tab did nothing at all
        await pilot.press("enter")
        await turn_done(pilot, until)
        assert [str(u.render()) for u in main.query(UserMessage)] == ["hello @src/"]


async def test_page_keys_scroll_the_transcript(harness, until):
    app = harness.app(["\n\n".join(f"paragraph {i}" for i in range(60))])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "talk a lot")
        await turn_done(pilot, until)
        view = main.query_one(ConversationView)
        await until(pilot, lambda: view.max_scroll_y > 20 and view.scroll_y == view.max_scroll_y)
        bottom = view.scroll_y
        await pilot.press("pageup")
        await until(pilot, lambda: view.scroll_y < bottom)
        await pilot.press("home")  # the prompt is empty: to the top
        await until(pilot, lambda: view.scroll_y == 0)
        await pilot.press("pagedown")
        await until(pilot, lambda: view.scroll_y > 0)
        await pilot.press("end")
        await until(pilot, lambda: view.scroll_y == view.max_scroll_y)
        prompt = main.query_one(PromptInput)
        prompt.load_text("some text")
        prompt.move_cursor((0, 4))
        await pilot.press("home")  # with text, Home is the prompt's: start of the line
        assert prompt.cursor_location == (0, 0) and view.scroll_y == view.max_scroll_y
        assert app.focused is prompt


async def test_think_alone_cycles_and_attach_checks_at_once(harness, until):
    Image.new("RGB", (8, 8), "red").save(harness.repo / "shot.png")
    (harness.repo / "fake.png").write_text("not an image at all")
    app = harness.app(["I see red."])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "/think")
        assert main.controller.thinking == "enabled" and "think enabled" in main.status.render()
        await send(pilot, "/think ")
        assert main.controller.thinking == "disabled"
        await send(pilot, "/attach missing.png")
        await until(pilot, lambda: bool(main.query(ErrorView)))
        assert "missing.png: no such file" in str(main.query(ErrorView).last().render())
        await send(pilot, "/attach fake.png")
        await until(pilot, lambda: len(main.query(ErrorView)) == 2)
        assert "fake.png" in str(main.query(ErrorView).last().render())
        assert main.controller.attachments == []  # neither was kept for the next prompt
        await send(pilot, "/attach shot.png")
        await until(pilot, lambda: len(main.controller.attachments) == 1)
        await send(pilot, "what colour?")
        await turn_done(pilot, until)
        media = harness.engine.requests[0].messages[-1].media
        assert [m.path for m in media] == [str(harness.repo / "shot.png")]


async def test_turn_timer_spinner_and_how_to_stop(harness, until):
    now = [100.0]
    app = harness.app(["word " * 300], pause_after=10, clock=lambda: now[0])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        line = main.query_one(ActivityLine)
        assert not line.display  # idle: nothing
        await send(pilot, "talk")
        await until(pilot, lambda: harness.engine.paused.is_set())
        await pilot.pause(0.15)
        assert str(line.render()) == "⠋ answering… 0s · esc to interrupt"
        now[0] += 75.3
        await pilot.pause(0.15)
        assert str(line.render()).endswith("answering… 1m 15s · esc to interrupt")
        await pilot.press("escape")
        await turn_done(pilot, until)
        await pilot.pause(0.15)
        assert not line.display


async def test_always_allow_a_command_prefix_not_every_command(harness, until, m3text):
    shell = m3text.shell_call
    script = [
        shell("echo one"),
        shell("echo two --flag"),
        shell("echo three; echo four"),
        shell("ls"),
        "Done.",
    ]
    app = harness.factory_app(script, approval="untrusted")
    async with at_approval(app, until, "run things", (110, 40)) as (pilot, main):
        buttons = [str(b.label) for b in app.screen.query("Button")]
        assert "Allow `echo …` this session (p)" in buttons  # it lasts the session, says so
        assert not any("for this session" in b for b in buttons)  # no "every shell command"
        await pilot.press("a")  # the old "always": does nothing for shell now
        assert isinstance(app.screen, ApprovalScreen)
        await pilot.press("p")
        # "echo two --flag" is covered: no question; "echo three; echo four" is not.
        await until(
            pilot,
            lambda: (
                isinstance(app.screen, ApprovalScreen)
                and "three" in app.screen.request.arguments["command"]
            ),
        )
        cards = list(main.query(ToolCard))
        assert cards[1].note == "allowed: echo …"
        assert not [b for b in app.screen.query("Button") if b.id == "approve_prefix"]
        await pilot.press("y")
        await until(
            pilot,
            lambda: (
                isinstance(app.screen, ApprovalScreen)
                and app.screen.request.arguments["command"] == "ls"
            ),
        )
        await pilot.press("y")
        await turn_done(pilot, until)
        assert main.controller.allowed_prefixes == [("echo",)]


async def test_resumed_tool_results_keep_their_error_flag(harness, until, m3text):
    (harness.repo / "notes.txt").write_text("Error: this line is only text\n")
    app = harness.app([m3text.read_call("missing.txt"), m3text.read_call("notes.txt"), "ok"])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "read")
        await turn_done(pilot, until)
        first = [c.status for c in main.query(ToolCard)]
        sid = main.controller.session.id
    assert first == ["error", "ok"]
    app2 = harness.app([], resume=sid)
    async with app2.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await pilot.pause(0.1)
        assert [c.status for c in main.query(ToolCard)] == ["error", "ok"]


async def test_ctrl_c_over_the_approval_modal_interrupts_without_a_toast(harness, until, m3text):
    app = harness.app([m3text.edit_call("src/calc.py", "a - b", "a + b")], approval="untrusted")
    async with at_approval(app, until, "fix add", SIZE) as (pilot, main):
        await pilot.press("ctrl+c")
        await turn_done(pilot, until)
        await until(pilot, lambda: app.screen is main)
        assert not main.query("Toast") and app.is_running
        assert (harness.repo / "src/calc.py").read_text().endswith("a - b\n")
