"""The Typer callback: `m3agent` opens the TUI only without a sub-command."""

from __future__ import annotations

import subprocess
import sys

from m3agent.app.cli import build_app
from typer.testing import CliRunner


def test_help_lists_the_tui_options():
    result = CliRunner().invoke(build_app(), ["--help"])
    assert result.exit_code == 0
    for option in (
        "--engine",
        "--model",
        "--base-url",
        "--script",
        "--thinking",
        "--approval",
        "--sandbox",
        "--cwd",
        "--resume",
    ):
        assert option in result.output


def test_a_sub_command_does_not_open_the_tui(m3home):
    # Without a terminal the TUI could not start; `sessions` must run and exit on its own.
    result = subprocess.run(
        [sys.executable, "-m", "m3agent.app.cli", "sessions"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_bad_option_value_is_one_line_and_exit_2(m3home):
    result = CliRunner().invoke(build_app(), ["--engine", "scripted", "--thinking", "lots"])
    assert result.exit_code == 2
    assert "thinking mode 'lots' is not one of enabled, disabled, adaptive" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_missing_script_is_reported(m3home, tmp_path):
    result = CliRunner().invoke(
        build_app(), ["--engine", "scripted", "--script", str(tmp_path / "nope.json")]
    )
    assert result.exit_code == 2
    assert "nope.json does not exist" in result.output


def test_without_a_terminal_it_points_to_run(m3home, tmp_path):
    script = tmp_path / "s.json"
    script.write_text("[]")
    result = subprocess.run(
        [sys.executable, "-m", "m3agent.app.cli", "--engine", "scripted", "--script", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    assert "the terminal UI needs a terminal" in result.stderr and "m3agent run" in result.stderr
