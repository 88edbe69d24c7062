"""Notifications: the bell / OSC 9 / OSC 777 when an approval is needed or a long turn ends;
`auto` is the bell, but nothing inside tmux unless asked; a bad value is a one-line error."""

from __future__ import annotations

import pytest
from m3agent.app.notify import resolve, sequence
from m3agent.app.tui.screens.approval_screen import ApprovalScreen
from pilot_steps import ready, send, turn_done

pytestmark = pytest.mark.anyio
SIZE = (110, 34)


def test_auto_is_off_in_tmux_unless_asked():
    assert resolve("auto", {"TMUX": "/tmp/tmux-0/default,1,0"}) == "off"
    assert resolve("auto", {}) == "bell"
    assert resolve("osc9", {"TMUX": "x"}) == "osc9"  # asked for: on, even in tmux
    with pytest.raises(ValueError, match="notify must be one of"):
        resolve("loud", {})
    assert sequence("osc9", "approve\x1b]x") == "\x1b]9;approve]x\x07"  # no ESC inside
    assert sequence("osc777", "hi") == "\x1b]777;notify;m3agent;hi\x07"


def test_bad_notify_in_config_is_one_line(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('notify = "loud"\n')
    r = subprocess.run(
        [str(Path(sys.executable).with_name("m3agent")), "run", "x", "--engine", "scripted"],
        env={"M3AGENT_HOME": str(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: notify must be one of auto, off, bell, osc9, osc777, got 'loud'"
    ]


@pytest.mark.parametrize("method", ["osc9", "off"])
async def test_approval_and_long_turn_notify(harness, until, m3text, method):
    from dataclasses import replace

    from m3agent.app.tui.app import create_app

    written: list[str] = []
    now = [1000.0]
    factory = harness.session_factory(
        [m3text.edit_call("src/calc.py", "a - b", "a + b"), "</mm:think>fixed"],
        approval="untrusted",
    )
    config = replace(
        harness.config(approval="untrusted"),
        notify=method,
        notify_write=written.append,
        clock=lambda: now[0],
    )
    app = create_app(factory, config)
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        await send(pilot, "fix add")
        await until(pilot, lambda: isinstance(app.screen, ApprovalScreen))
        now[0] += 30  # the user took a while: the turn is long
        await pilot.press("y")
        await turn_done(pilot, until)
        assert main.controller.completed_turns == 1
    if method == "off":
        assert written == []
    else:
        assert written == [
            "\x1b]9;m3agent: approve edit_file?\x07",
            "\x1b]9;m3agent: turn done after 30 s\x07",
        ]
