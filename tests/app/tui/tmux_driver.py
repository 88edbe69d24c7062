"""The real program in a real terminal: a private tmux server, the command line a pane runs
`m3agent` with, and the key presses and waits the tmux tests share."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

COLS, ROWS = 110, 36


def program() -> str:
    """The installed `m3agent` script beside this Python, else the module."""
    exe = Path(sys.executable).parent / "m3agent"
    return str(exe) if exe.exists() else f"{sys.executable} -m m3agent.app.cli"


def pane_command(env: str, program: str, args: str) -> str:
    """A pane's shell line: PROGRAM ARGS with ENV (no COLUMNS/LINES from the test's shell),
    then its exit status, and the pane stays open for the screen to be read."""
    return f"env -u COLUMNS -u LINES {env} {program} {args}; echo EXIT=$?; sleep 60"


def scripted_command(repo: Path, script: Path, home: Path, approval: str = "untrusted") -> str:
    """`m3agent --engine scripted --script SCRIPT` in REPO with the data home HOME."""
    return pane_command(
        f"M3AGENT_HOME={home} TERM=xterm-256color",
        program(),
        f"--engine scripted --script {script} --approval {approval} --cwd {repo}",
    )


class Tmux:
    """A private tmux server (its own socket), so the test never touches the user's. As a
    context manager it kills its server on the way out."""

    def __init__(self) -> None:
        self.socket = f"m3agent-test-{uuid.uuid4().hex[:8]}"

    def __enter__(self) -> Tmux:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, *args: str) -> str:
        proc = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=10
        )
        return proc.stdout

    def start(self, command: str, cols: int = COLS, rows: int = ROWS) -> None:
        """Session `t`, one pane of COLS x ROWS running COMMAND."""
        self.run("new-session", "-d", "-s", "t", "-x", str(cols), "-y", str(rows), command)

    def type(self, text: str) -> None:
        """TEXT as typed characters (no key names)."""
        self.run("send-keys", "-t", "t", "-l", text)

    def press(self, *keys: str) -> None:
        """Named keys (Enter, C-c, Escape...) or plain characters."""
        self.run("send-keys", "-t", "t", *keys)

    def display(self, fmt: str) -> str:
        """A tmux format (#{pane_title}, #{alternate_on}...) for the pane."""
        return self.run("display", "-p", "-t", "t", fmt).strip()

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "t")

    def joined_screen(self) -> str:
        """The screen with lines the terminal wrapped joined back (a word cut at the edge
        is whole again)."""
        return self.run("capture-pane", "-p", "-J", "-t", "t")

    def wait_for(self, text: str, timeout: float = 30.0, poll_s: float = 0.03) -> float:
        # Each poll is a tmux process; polling too often would steal CPU from the app on a
        # 2-core machine and slow down what is being measured.
        start = time.perf_counter()
        while True:
            if text in self.screen():
                return time.perf_counter() - start
            if time.perf_counter() - start > timeout:
                raise AssertionError(f"{text!r} never appeared; the screen was:\n{self.screen()}")
            time.sleep(poll_s)

    def wait_loaded(self, timeout: float = 30.0, poll_s: float = 0.03) -> None:
        """Until the status bar no longer says `loading` (the session is ready), at most
        TIMEOUT seconds."""
        start = time.perf_counter()
        while "loading" in self.screen() and time.perf_counter() - start < timeout:
            time.sleep(poll_s)

    def quit(self) -> None:
        """ctrl+q, and the clean exit the shell line prints on the restored screen."""
        self.press("C-q")
        self.wait_for("EXIT=0")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True, timeout=10)
