"""`m3agent parse` through a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from m3agent.engine.m3.tokens import NS

TEXT = (
    "I should check.</mm:think>Checking.\n"
    f'{NS}<tool_call>\n{NS}<invoke name="run_shell">{NS}<command>ls -la{NS}</command>'
    f"{NS}<timeout>30{NS}</timeout>{NS}</invoke>\n{NS}</tool_call>"
)


def run(args, stdin, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "m3agent.app.cli", "parse", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


@pytest.mark.parametrize("chunk", ["0", "1", "5"])
def test_parse_with_tools(tmp_path, spec_tools, chunk):
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(spec_tools))
    r = run(["--tools", str(tools), "--thinking-mode", "enabled", "--chunk-size", chunk], TEXT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {
        "reasoning": "I should check.",
        "content": "Checking.\n",
        "tool_calls": [{"name": "run_shell", "arguments": {"command": "ls -la", "timeout": 30}}],
    }


def test_parse_without_tools_default_mode():
    r = run([], TEXT)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    # adaptive: the closer is not leading, so it stays content; no tools offered: as vLLM, the
    # tool markup stays content too
    assert out == {"reasoning": None, "content": TEXT, "tool_calls": []}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read --tools file"),
        ("{", "is not valid JSON"),
        ('{"a": 1}', "must hold a JSON array"),
        ('[{"type": "function"}]', "function name"),
    ],
)
def test_bad_tools_file_exit_2(tmp_path, content, message):
    path = tmp_path / "tools.json"
    if content is not None:
        path.write_text(content)
    r = run(["--tools", str(path)], "x")
    assert r.returncode == 2
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""


def test_bad_mode_exit_2():
    r = run(["--thinking-mode", "sometimes"], "x")
    assert r.returncode == 2 and "--thinking-mode" in r.stderr


def test_non_utf8_stdin_exit_2():
    r = subprocess.run(
        [sys.executable, "-m", "m3agent.app.cli", "parse"],
        input=b"ok \xff\xfe",
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 2 and b"not UTF-8" in r.stderr


def test_unicode_round_trip():
    r = run(["--chunk-size", "1"], "héllo 世界 🎉")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["content"] == "héllo 世界 🎉"
