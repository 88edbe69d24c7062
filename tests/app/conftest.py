"""Fixtures for the CLI tests: a temp git repo, an isolated M3AGENT_HOME, and a runner that
starts `m3agent` as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ..support.cli import scripted_run
from ..support.markup import NS, answer, calls, invoke


class Cli:
    def __init__(self, home: Path, tmp: Path):
        self.home = home
        self.tmp = tmp
        self._n = 0

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["M3AGENT_HOME"] = str(self.home)
        env.pop("M3AGENT_CONFIG", None)
        return env

    def script(self, *replies: str) -> Path:
        self._n += 1
        p = self.tmp / f"script{self._n}.json"
        p.write_text(json.dumps(list(replies)))
        return p

    def run(self, *args: str, timeout: float = 120, stdin: str | None = None, cwd=None):
        cmd = [sys.executable, "-m", "m3agent.app.cli", *args]
        return subprocess.run(
            cmd,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=stdin if stdin is not None else "",
            cwd=cwd,
        )

    def run_scripted(self, prompt: str, script: Path, cwd: Path, *flags: str, **kw):
        """`m3agent run PROMPT --engine scripted --script SCRIPT --cwd CWD FLAGS...`."""
        return self.run(*scripted_run(prompt, script, cwd, *flags), **kw)

    def popen_scripted(self, prompt: str, script: Path, cwd: Path, *flags: str):
        return self.popen(*scripted_run(prompt, script, cwd, *flags))

    def popen(self, *args: str, cwd=None) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "m3agent.app.cli", *args]
        return subprocess.Popen(
            cmd,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
        )


def events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


@pytest.fixture
def repo(make_repo) -> Path:
    return make_repo({"greet.py": 'def greet():\n    return "helo"\n'})


@pytest.fixture
def cli(home, tmp_path) -> Cli:
    return Cli(home, tmp_path)


@pytest.fixture
def m3():
    return SimpleNamespace(NS=NS, invoke=invoke, calls=calls, answer=answer, events=events)
