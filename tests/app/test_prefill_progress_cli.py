"""Prefill progress of `m3agent run` on stderr (issue 22), through the installed console script
and a real tiny M3 on the CPU, in-process: a prompt long enough for several 2,048-token chunks.
Not a terminal: plain `m3agent: prefill ...` lines and the final one. A terminal (a pty): one
line rewritten in place (carriage return + erase), left standing by "prefill done". And the
default path: the model in a background `m3agent serve`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ..support.cli import CONSOLE_SCRIPT, init_tiny_model, run_stderr_on_a_pty

pytestmark = pytest.mark.slow
EXE = Path(sys.executable).parent / "m3agent"
PROMPT = "Summarise this text. " + "The quick brown fox jumps over the lazy dog. " * 40


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("m3") / "tiny"
    return init_tiny_model(path, "--seed", "1", command=CONSOLE_SCRIPT)


def _argv(tiny: Path, repo: Path, *, warm: bool = False) -> list[str]:
    return [
        str(EXE),
        "run",
        PROMPT,
        "--engine",
        "native",
        "--model",
        str(tiny),
        *(() if warm else ("--in-process",)),
        "--cwd",
        str(repo),
        "--approval",
        "never",
        "--max-tokens",
        "2",
        "--max-turns",
        "1",
    ]


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "M3AGENT_HOME": str(home)}
    env.pop("M3AGENT_CONFIG", None)
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('device = "cpu"\n')
    return env


def test_plain_lines_when_stderr_is_not_a_terminal(tiny, repo, home):
    r = subprocess.run(
        _argv(tiny, repo), env=_env(home), capture_output=True, text=True, timeout=600
    )
    assert r.returncode in (0, 4), r.stderr
    lines = [x for x in r.stderr.splitlines() if "prefill" in x]
    assert lines and lines[-1].startswith("m3agent: prefill done: "), r.stderr
    running = lines[:-1]
    assert running, r.stderr  # at least one report while the chunks ran
    m = re.fullmatch(
        r"m3agent: prefill ([\d,]+)/([\d,]+) tokens \d+% · [\d,]+ tok/s · (~\d+ s|<1 s) left",
        running[0],
    )
    assert m, running[0]
    total = int(m.group(2).replace(",", ""))
    assert int(m.group(1).replace(",", "")) == 2048 and total > 3 * 2048
    assert "\r" not in r.stderr and "\x1b" not in r.stderr  # no terminal codes in a file


def test_one_rewritten_line_on_a_terminal(tiny, repo, home):
    code, _, text = run_stderr_on_a_pty(_argv(tiny, repo), _env(home), quiet_s=600)
    assert code in (0, 4), text
    updates = re.findall(r"\r\x1b\[Kprefill [\d,]+/[\d,]+ tokens", text)
    assert updates, text  # rewritten in place, with no newline of its own
    assert re.search(r"\r\x1b\[Kprefill done: [\d,]+ tokens in [\d.]+ s[^\n]*\r?\n", text), text
    assert not re.search(r"prefill [\d,]+/[\d,]+ tokens[^\r\x1b]*\n", text)  # never stands


def test_plain_lines_through_the_background_server(tiny, repo, home):
    """The default path: the model in a background `m3agent serve`, which streams its prefill
    chunks to this client (the completions stream's m3agent_prefill chunks)."""
    env = _env(home)
    try:
        r = subprocess.run(
            _argv(tiny, repo, warm=True), env=env, capture_output=True, text=True, timeout=900
        )
        assert r.returncode in (0, 4), r.stderr
        lines = [x for x in r.stderr.splitlines() if "prefill" in x]
        assert lines and lines[-1].startswith("m3agent: prefill done: "), r.stderr
        assert re.fullmatch(r"m3agent: prefill 2,048/[\d,]+ tokens .*", lines[0]), lines
    finally:
        subprocess.run([str(EXE), "serve", "--stop"], env=env, capture_output=True, timeout=120)
