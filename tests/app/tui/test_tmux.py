"""The real program in a real terminal: `m3agent --engine scripted --script FILE` under tmux,
in a temporary git repository. Types a prompt, approves an edit, checks the screen and the
file, quits, and measures the time to first paint (written to bench/results)."""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import pytest
from tmux_driver import COLS, ROWS, Tmux, pane_command, program, scripted_command

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

ROOT = Path(__file__).resolve().parents[3]
RESULT = ROOT / "bench" / "results" / "tui_first_paint.json"


def _first_paint(repo: Path, script: Path, home: Path) -> float:
    """One more launch, only to time the first frame; quits at once."""
    with Tmux() as tmux:
        t0 = time.perf_counter()
        tmux.start(scripted_command(repo, script, home))
        tmux.wait_for("Ask m3agent")
        elapsed = time.perf_counter() - t0
        tmux.wait_for("tok/s")
        tmux.quit()
        return elapsed


def test_tmux_prompt_approve_edit_and_first_paint(repo, m3home, m3text, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                "<mm:think>add subtracts.</mm:think>"
                + m3text.edit_call("src/calc.py", "a - b", "a + b"),
                "Fixed: `add` now **adds**.",
            ]
        )
    )
    with Tmux() as tmux:
        t0 = time.perf_counter()
        tmux.start(scripted_command(repo, script, m3home))
        tmux.wait_for("Ask m3agent")  # the prompt's placeholder: the first frame is up
        first_paint_s = time.perf_counter() - t0
        tmux.wait_for("tok/s")
        tmux.wait_loaded()
        ready_s = time.perf_counter() - t0

        tmux.type("fix the add function")
        tmux.press("Enter")
        tmux.wait_for("Allow edit_file?")
        assert "+    return a + b" in tmux.screen()  # the modal shows the diff
        tmux.press("y")
        tmux.wait_for("now adds")
        screen = tmux.screen()
        assert "✓ done" in screen and "edit_file" in screen
        assert "fix the add function" in screen
        assert (repo / "src/calc.py").read_text() == "def add(a, b):\n    return a + b\n"

        tmux.quit()  # clean exit; the shell line prints on the restored screen
        session_id = next((m3home / "sessions").glob("*.jsonl")).stem
        assert f"resume this session with: m3agent resume {session_id}" in tmux.screen()

    samples = sorted([first_paint_s] + [_first_paint(repo, script, m3home) for _ in range(2)])
    load1 = os.getloadavg()[0]
    record = {
        "what": "wall time from launching `m3agent --engine scripted` in tmux to the first "
        "frame (prompt visible), 3 launches; and to a ready session (engine, tools, "
        "sandbox probe) in the first launch",
        "first_paint_s": {
            "min": round(samples[0], 3),
            "median": round(samples[1], 3),
            "max": round(samples[2], 3),
        },
        "session_ready_s": round(ready_s, 3),
        "target_first_paint_s": 1.0,
        "cpus": os.cpu_count(),
        "load_average_1m": round(load1, 2),
        "python": platform.python_version(),
        "terminal": f"tmux {COLS}x{ROWS}",
    }
    print(
        f"\nTUI first paint min {samples[0]:.3f} s, median {samples[1]:.3f} s, "
        f"session ready {ready_s:.3f} s (load average {load1:.1f}, {os.cpu_count()} CPUs)"
    )
    # The committed figure is refreshed on purpose (M3AGENT_WRITE_BENCH=1), never as a side
    # effect of an ordinary test run in a user's clone.
    if os.environ.get("M3AGENT_WRITE_BENCH") == "1":
        RESULT.parent.mkdir(parents=True, exist_ok=True)
        RESULT.write_text(json.dumps(record, indent=2) + "\n")
    # A loaded shared machine can be several times slower; the budget scales with the load
    # so the test checks for a regression, not for an idle machine.
    budget = 1.0 * max(1.0, load1 / (os.cpu_count() or 1))
    assert samples[1] < max(3.0, budget), record


CRASHING_MAIN = """
import sys
from m3agent.app.cli import build_app
from m3agent.app.tui.screens import main_screen

async def boom(self, message):
    raise RuntimeError("injected crash")

main_screen.MainScreen.on_session_ready = boom  # a bug in the TUI, on purpose
sys.argv = ["m3agent"] + sys.argv[1:]
build_app()()
"""


def test_tmux_crash_restores_the_terminal_and_prints_the_log_path(repo, m3home, tmp_path):
    main = tmp_path / "crashing_main.py"
    main.write_text(CRASHING_MAIN)
    script = tmp_path / "script.json"
    script.write_text("[]")
    with Tmux() as tmux:
        tmux.start(
            pane_command(
                f"M3AGENT_HOME={m3home}",
                f"{sys.executable} {main}",
                f"--engine scripted --script {script} --cwd {repo}",
            )
        )
        tmux.wait_for("EXIT=1")
        screen = tmux.screen()
        alternate = tmux.display("#{alternate_on}")
    assert alternate == "0"  # back on the normal screen: the terminal was restored
    logs = list((m3home / "logs").glob("crash-*.log"))
    assert len(logs) == 1 and "injected crash" in logs[0].read_text()
    joined = screen.replace("\n", "")  # the path may wrap at the pane's edge
    assert "m3agent crashed (RuntimeError: injected crash); the traceback is in" in joined
    assert str(logs[0]) in joined


def test_tmux_escape_sequences_reach_the_screen_only_visibly(repo, m3home, m3text, tmp_path):
    """Issue 13, class 7, in a real terminal: a tool output and an answer that retitle the
    window (OSC 2), write the clipboard (OSC 52) and clear the screen leave the pane's title
    alone and show up as `\\x1b...` text."""
    (repo / "notes.txt").write_text("\x1b]2;PWNED-BY-TOOL\x07\x1b]52;c;cHduZWQ=\x07\x1b[2J\n")
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [m3text.read_call("notes.txt"), "Read. \x1b]2;PWNED-BY-MODEL\x07\x1b[2J done-marker"]
        )
    )
    with Tmux() as tmux:
        tmux.start(scripted_command(repo, script, m3home))
        tmux.run("set-option", "-t", "t", "set-titles", "on")
        before = tmux.display("#{pane_title}")
        tmux.wait_for("tok/s")
        tmux.wait_loaded()
        tmux.type("read the notes")
        tmux.press("Enter")
        tmux.wait_for("done-marker")
        screen = tmux.screen()
        title = tmux.display("#{pane_title}")
        tmux.quit()
    assert "PWNED" not in title and title == before
    assert "\\x1b]2;PWNED-BY-MODEL\\x07\\x1b[2J done-marker" in screen
    assert "\\x1b]2;PWNED-BY-TOOL\\x07" in screen


def test_tmux_bare_m3agent_with_nothing_configured_opens_the_setup(repo, m3home):
    with Tmux() as tmux:
        tmux.start(
            pane_command(
                f"-u M3AGENT_ENGINE -u M3AGENT_MODEL M3AGENT_HOME={m3home} TERM=xterm-256color",
                program(),
                f"--cwd {repo}",
            )
        )
        tmux.wait_for("Set up m3agent")
        assert "needs --model" not in tmux.screen()
        for _ in range(3):
            tmux.press("Down")
        tmux.press("Enter")  # the scripted demo
        tmux.wait_for("starting the scripted demo")
        tmux.wait_for("tok/s")
        tmux.type("hello")
        tmux.press("Enter")
        tmux.wait_for("No model answered")
        tmux.quit()
    assert not (m3home / "config.toml").exists()


def test_tmux_tab_menu_paging_and_ctrl_c_twice(repo, m3home, tmp_path):
    """Issue 15 point 6 in a real terminal: Tab leaves the focus in the prompt (the keys after
    it, Enter too, still arrive), `/` opens the menu, ctrl+c twice quits and prints the
    command that resumes the session."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["\n\n".join(f"line {i}" for i in range(80)) + "\n\nlast-line"]))
    with Tmux() as tmux:
        tmux.start(scripted_command(repo, script, m3home))
        tmux.wait_for("tok/s")
        tmux.wait_loaded()
        tmux.type("hel")
        tmux.press("Tab")
        tmux.type("lo there")
        tmux.press("Enter")
        tmux.wait_for("last-line")  # Enter after the Tab reached the prompt: the turn ran
        assert "hello there" not in tmux.screen()  # scrolled off, above the answer
        tmux.press("PPage")
        tmux.wait_for("line 52", timeout=10)  # was not on screen before the page up
        tmux.press("Home")  # the prompt is empty: to the top
        tmux.wait_for("hello there", timeout=10)
        tmux.type("/se")
        tmux.wait_for("browse saved sessions")
        tmux.press("Escape")
        tmux.press("C-c")  # clears "/se"
        tmux.press("C-c")
        tmux.wait_for("ctrl+c again to quit")
        tmux.press("C-c")
        tmux.wait_for("EXIT=0")
        assert "resume this session with: m3agent resume" in tmux.screen()
