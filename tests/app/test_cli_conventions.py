"""Issue 15 point 8: --version, -h, short flags, --continue / resume --last, -o FILE, JSON
results with duration and an error flag, readable --help, and one line (with a documented
exit code) for every bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from m3agent.app import exit_codes
from m3agent.app.cli import build_app, run_cli

EXE = Path(sys.executable).parent / "m3agent"


def _commands(app) -> list[list[str]]:
    """Every command path of the CLI, sub-groups included (through click's group protocol:
    the root builds its sub-commands on demand)."""
    from typer.main import get_command

    def walk(cmd, path):
        yield path
        if not hasattr(cmd, "list_commands"):
            return
        ctx = cmd.make_context("m3agent", [], resilient_parsing=True)
        for name in cmd.list_commands(ctx):
            yield from walk(cmd.get_command(ctx, name), [*path, name])

    return list(walk(get_command(app), []))


def test_version_from_the_console_script(home):
    for flag in ("--version", "-V"):
        r = subprocess.run([str(EXE), flag], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout == f"m3agent {version('m3agent')}\n", r


def test_every_help_is_readable(capsys):
    paths = _commands(build_app())
    assert ["run"] in paths and ["resume"] in paths and ["model", "init-tiny"] in paths
    for path in paths:
        assert run_cli([*path, "-h"]) == 0, path
        out = capsys.readouterr().out
        assert out.startswith("Usage: m3agent"), path
        # No type labels, no braces around arguments, nothing cut short.
        assert not re.search(r"<(str|int|float|bool|path|list\[\w+\])>", out), (path, out)
        assert "{" not in out.splitlines()[0], (path, out)
        cut = [line for line in out.splitlines()[1:] if line.rstrip().endswith(("...", "…"))]
        assert not cut, (path, cut)  # a help line cut short ends in an ellipsis
    assert run_cli(["run", "--help"]) == 0
    run_help = capsys.readouterr().out
    for short in (
        "-m, --model MODEL",
        "-C, --cwd DIR",
        "-c, --continue",
        "-r, --resume ID",
        "-o, --output-last-message FILE",
        "-s, --sandbox MODE",
        "-a, --approval POLICY",
        "-i, --image FILE",
        "--network ",
        "-h, --help",
    ):
        assert short in run_help, short
    assert "read-only, workspace-write or full-access." in run_help


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--bogus", "x"], "No such option: --bogus (m3agent run -h for help)"),
        (["run"], "Missing argument 'PROMPT'"),
        (["frobnicate"], "No such command 'frobnicate'"),
        (["sessions", "-n", "lots"], "Invalid value for '--limit'"),
        (["run", "x", "--engine", "warp"], "unknown engine 'warp'"),
        (["run", "x", "-c", "-r", "someid"], "--continue and --resume ID: give one of them"),
        (["run", "x", "-c"], "no session to continue in"),
        (
            ["run", "x", "-o", "/nonexistent-dir/answer.txt", "--engine", "scripted"],
            "-o /nonexistent-dir/answer.txt: no such directory",
        ),
        (["resume"], "give a session ID or --last"),
        (["resume", "--last"], "no session to continue in"),
        (["resume", "20200101-000000-abcdef"], "no session '20200101-000000-abcdef'"),
        (["-c"], "no session to continue in"),
        (["--thinking", "lots"], "thinking mode 'lots' is not one of"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(home, capsys, args, message):
    assert run_cli(args) == exit_codes.USAGE_ERROR
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert message in lines[0]


def test_bad_option_through_the_console_script_is_one_line(home):
    r = subprocess.run(
        [str(EXE), "run", "--max-turns", "many", "x"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: Invalid value for '--max-turns'")
    assert r.stderr.endswith("(m3agent run -h for help)\n") and len(r.stderr.splitlines()) == 1


def test_continue_output_file_and_json_result(cli, repo, m3, tmp_path):
    first = cli.run(
        "run",
        "remember 42",
        "--engine",
        "scripted",
        "--script",
        str(cli.script(m3.answer("Noted."))),
        "-C",
        str(repo),
        "--output-format",
        "json",
    )
    assert first.returncode == 0, first.stderr
    sid = json.loads(first.stdout)["session_id"]
    answer_file = tmp_path / "last.txt"
    again = cli.run(
        "run",
        "what was it?",
        "-c",
        "-e",
        "scripted",
        "--script",
        str(cli.script(m3.answer("It was 42."))),
        "-o",
        str(answer_file),
        "--output-format",
        "json",
        cwd=repo,
    )
    assert again.returncode == 0, again.stderr
    out = json.loads(again.stdout)
    assert out["session_id"] == sid  # continued the last session of this workspace
    assert answer_file.read_text() == "It was 42."
    assert out["is_error"] is False and out["turns"] == 1 and out["exit_code"] == 0
    assert 0 < out["duration_s"] < 120 and out["duration_api_s"] >= 0
    assert out["usage"]["prompt_tokens"] > 0


def test_json_result_flags_an_error_and_stream_json_carries_it(cli, repo, m3):
    loop = m3.calls(m3.invoke("list_dir", path="."))
    script = cli.script(loop, loop, loop)
    r = cli.run_scripted("loop", script, repo, "--max-turns", "2", "--output-format", "json")
    assert r.returncode == exit_codes.TURN_LIMIT
    out = json.loads(r.stdout)
    assert out["is_error"] is True and out["reason"] == "max_turns" and out["turns"] == 2
    s = cli.run_scripted("loop", script, repo, "--max-turns", "2", "--output-format", "stream-json")
    *_, done, last = (json.loads(x) for x in s.stdout.splitlines())
    assert done["type"] == "turn_complete" and done["is_error"] is True
    assert last["type"] == "result" and last["subtype"] == "error_max_turns"  # Claude Code's
    assert last["is_error"] is True
    assert last["turns"] == 2 and last["duration_s"] > 0
