"""One hook command: the event as JSON on stdin, the answer from its exit code and stdout.

A hook runs in the project directory, through /bin/sh like Claude Code's: the user's own
hooks on the host, as the user; a project's (its definition came with the repository) inside
the tool sandbox, like the shell tool's commands (confined.py says why). Their environment
is scrubbed with the same allow-list as sandboxed commands (no API keys or tokens of the
agent's own environment), plus M3AGENT_PROJECT_DIR and CLAUDE_PROJECT_DIR so that existing
Claude Code scripts find the project, and PYTHONSAFEPATH=1, so that a Python hook run in the
project directory imports no module the model planted there or beside the script; PATH keeps
no relative entry and none inside the workspace, so a program name finds no planted program.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.tools.host_programs import host_path
from m3agent.tools.sandbox.envscrub import scrub

from .config import HookCommand
from .confined import run_confined
from .pins import changed

if TYPE_CHECKING:
    from m3agent.tools.sandbox.runner import Sandbox

# Events whose hooks guard something (a tool call, a prompt): a hook that may not run blocks.
_GUARDS = frozenset({"PreToolUse", "UserPromptSubmit"})

BLOCK_EXIT = 2  # Claude Code's "blocking error": stderr goes to the model
_OUTPUT_CAP = 64_000  # a hook's stdout/stderr kept (a chatty script must not flood the prompt)


@dataclass(frozen=True, slots=True)
class HookRun:
    """What one command did. `answer` is its stdout parsed as JSON when it was an object."""

    command: str
    exit_code: int | None  # None: it timed out or could not start
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    answer: dict[str, Any] = field(default_factory=dict)
    sandboxed: bool = False  # it ran in the tool sandbox: its answer may not widen (dispatch)

    @property
    def blocking(self) -> bool:
        return self.exit_code == BLOCK_EXIT


def hook_env(project: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    env, _withheld = scrub(dict(os.environ if base is None else base))
    # Hooks run in the project directory: Python must not import a module the model planted
    # there (or beside a script) in place of the one the hook means, and a program name must
    # not find one the model planted (a relative PATH entry, or one inside the workspace).
    env["PYTHONSAFEPATH"] = "1"
    if "PATH" in env:
        env["PATH"] = host_path(env["PATH"], (project,))
    env["M3AGENT_PROJECT_DIR"] = str(project)
    env["CLAUDE_PROJECT_DIR"] = str(project)
    return env


async def run_hook(
    hook: HookCommand,
    payload: Mapping[str, Any],
    project: Path,
    env: Mapping[str, str],
    sandbox: Sandbox | None = None,
) -> HookRun:
    """Run HOOK with PAYLOAD on its stdin: in SANDBOX when the hook is `sandboxed` (a
    project's; none given: it does not run), on the host otherwise."""
    started = time.monotonic()
    guard = payload.get("hook_event_name") in _GUARDS
    stale = changed(hook.pins, project)
    if stale:  # the model may have written them: the trusted program is not what runs
        why = (
            f"hook not run: {', '.join(stale)}: changed since the project's hooks were trusted "
            "(the model can write the workspace), or cannot be pinned; review it and run "
            "`m3agent hooks trust`"
        )
        return HookRun(hook.command, BLOCK_EXIT if guard else None, "", why, 0.0)
    data = json.dumps(payload).encode()
    if hook.sandboxed:
        if sandbox is None:  # never on the host instead
            why = "hook not run: it needs the tool sandbox and none was given"
            return HookRun(hook.command, BLOCK_EXIT if guard else None, "", why, 0.0)
        c = await run_confined(hook.command, data, project, env, hook.timeout_s, sandbox)
        code = BLOCK_EXIT if c.refused and guard else c.exit_code
        return _answered(hook, code, c.stdout, c.stderr, started, c.timed_out)
    try:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            hook.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(project),
            env=dict(env),
            start_new_session=True,  # its own group: a timeout kills what it started too
        )
    except OSError as e:
        return HookRun(hook.command, None, "", f"cannot start: {e}", time.monotonic() - started)
    try:
        out, err = await asyncio.wait_for(proc.communicate(data), hook.timeout_s)
    except (TimeoutError, asyncio.CancelledError) as e:
        _kill_group(proc.pid)
        await proc.wait()
        if isinstance(e, asyncio.CancelledError):
            raise
        return HookRun(
            hook.command,
            None,
            "",
            f"timed out after {hook.timeout_s:g}s",
            time.monotonic() - started,
            timed_out=True,
        )
    return _answered(
        hook, proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"), started
    )


def _answered(
    hook: HookCommand,
    code: int | None,
    stdout: str,
    stderr: str,
    started: float,
    timed_out: bool = False,
) -> HookRun:
    """The run, its output capped and its stdout read as the answer when it is an object."""
    stdout, stderr = stdout[:_OUTPUT_CAP], stderr[:_OUTPUT_CAP]
    answer: dict[str, Any] = {}
    if code == 0 and stdout.strip().startswith("{"):
        try:
            parsed = json.loads(stdout)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            answer = parsed
    duration = time.monotonic() - started
    return HookRun(hook.command, code, stdout, stderr, duration, timed_out, answer, hook.sandboxed)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
