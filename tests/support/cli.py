"""The m3agent CLI as a real child process with a private data home (M3AGENT_HOME, and no
M3AGENT_CONFIG from the developer's environment), and the wait for a `serve` to be ready."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

# `python -m` from this interpreter, or the installed console script beside it.
PYTHON_CLI = (sys.executable, "-m", "m3agent.app.cli")
CONSOLE_SCRIPT = (str(Path(sys.executable).parent / "m3agent"),)


def cli_env(home: Path) -> dict[str, str]:
    env = {**os.environ, "M3AGENT_HOME": str(home)}
    env.pop("M3AGENT_CONFIG", None)
    return env


def scripted_run(prompt: str, script: Path, cwd: Path, *flags: str) -> tuple[str, ...]:
    """The arguments of `m3agent run PROMPT` on the scripted engine (SCRIPT: its replies) in
    the workspace cwd, then flags."""
    return (
        "run",
        prompt,
        "--engine",
        "scripted",
        "--script",
        str(script),
        "--cwd",
        str(cwd),
        *flags,
    )


def run_cli(
    home: Path,
    *args: str,
    timeout: float = 300,
    cwd: Path | None = None,
    text: bool = True,
    command: tuple[str, ...] = PYTHON_CLI,
) -> subprocess.CompletedProcess:
    """`m3agent ARGS` to the end, stdin closed, output captured."""
    return subprocess.run(
        [*command, *args],
        env=cli_env(home),
        cwd=cwd,
        capture_output=True,
        text=text,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def run_stderr_on_a_pty(
    argv: list[str], env: dict[str, str], quiet_s: float
) -> tuple[int, str, str]:
    """ARGV to the end with stdin closed, stdout a pipe and stderr a new pseudo-terminal, read
    until the child closes it or QUIET_S seconds pass without output; (exit status, stdout,
    what the terminal showed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([master], [], [], quiet_s)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    out, _ = proc.communicate(timeout=60)
    os.close(master)
    return proc.returncode, out.decode(), b"".join(chunks).decode("utf-8", "replace")


def start_cli(
    home: Path,
    *args: str,
    command: tuple[str, ...] = PYTHON_CLI,
    stdout: int = subprocess.PIPE,
    **popen: object,
) -> subprocess.Popen:
    """`m3agent ARGS` started in the background (a server): stdin closed, stderr a text pipe."""
    return subprocess.Popen(
        [*command, *args],
        env=cli_env(home),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[call-overload]
    )


def init_tiny_model(model: Path, *flags: str, command: tuple[str, ...] = PYTHON_CLI) -> Path:
    """`m3agent model init-tiny` of a 2-layer, 128-wide, 2-expert random M3 at model, then
    flags (`--seed N`...)."""
    r = run_cli(
        model.parent,
        *("model", "init-tiny", str(model), "--layers", "2", "--hidden", "128", "--experts", "2"),
        *flags,
        command=command,
    )
    assert r.returncode == 0, r.stderr
    return model


def wait_ready(home: Path, proc: subprocess.Popen, timeout: float = 120) -> dict:
    """The lock file of the server proc once it says ready (fails if proc exits first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        for lock in (home / "serve").glob("*.json"):
            data = json.loads(lock.read_text())
            if data.get("state") == "ready":
                return data
        time.sleep(0.2)
    raise AssertionError("the server did not become ready")
