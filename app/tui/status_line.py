"""The scriptable status line (Claude Code's `statusLine`): the user's command is fed a JSON
of the session's figures on stdin, and the first line it prints is shown in the status bar.

It runs when what it would be fed has changed, never two at a time and at most once every
MIN_INTERVAL_S (the latest figures win), with the command's timeout; it runs as hooks do
(agent/hooks/runner.py: `/bin/sh -c`, in the workspace, its own process group, the agent's
secrets scrubbed from its environment; a project's in the tool sandbox, under the policy
app/status_line.py gave it). A failure falls back to the built-in line and is reported
once. Which command runs, and trust: app/status_line.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.agent.hooks import HookCommand
from m3agent.agent.hooks.runner import hook_env, run_hook
from m3agent.engine.api import Usage
from m3agent.tools.sandbox.runner import Sandbox

from ..status_line import StatusLineCommand
from .status import StatusState
from .usage_tally import UsageTally

if TYPE_CHECKING:
    from .controller import SessionController

MIN_INTERVAL_S = 0.3  # Claude Code's: at most every 300 ms


@cache
def _version() -> str:
    try:
        return version("m3agent")
    except PackageNotFoundError:
        return ""


def status_payload(
    state: StatusState,
    usage: UsageTally,
    *,
    session_id: str | None,
    transcript_path: str | None,
    cwd: Path,
    mode: str,
) -> dict[str, Any]:
    """What the command reads on stdin: Claude Code's fields where they exist (session_id,
    transcript_path, cwd, model, workspace, version, cost, context_window), then m3agent's own
    (engine, state, thinking, permission_mode, tokens, prompt_cache)."""
    totals = usage.calls
    last: Usage | None = usage.last
    size = state.context_max
    used = state.context_used
    return {
        "hook_event_name": "Status",
        "session_id": session_id,
        "transcript_path": transcript_path,
        "cwd": str(cwd),
        "model": {"id": state.model, "display_name": state.model or state.engine},
        "workspace": {"current_dir": str(cwd), "project_dir": str(cwd)},
        "version": _version(),
        "cost": {
            "total_cost_usd": None,  # a local or self-hosted model has no per-token price
            "total_api_duration_ms": round(usage.model_time_s * 1000),
        },
        "context_window": {
            "context_window_size": size,
            "used_tokens": used,
            "used_percentage": round(100 * used / size, 1) if used is not None and size else None,
            "total_input_tokens": totals.prompt_tokens,
            "total_output_tokens": totals.generated_tokens,
        },
        "engine": state.engine,
        "state": state.state,
        "thinking": state.thinking,
        "permission_mode": mode,
        "tokens": {
            "prompt": totals.prompt_tokens,
            "cached": totals.cached_prompt_tokens,
            "generated": totals.generated_tokens,
            "model_calls": totals.requests,
            "tokens_per_s": round(state.tokens_per_s, 1) if state.tokens_per_s else None,
        },
        # the last model call's prompt: how much of it came from the prefix cache, and why
        # the rest did not ("first request", "snapshot refreshed", ...; None: a full hit)
        "prompt_cache": {
            "prompt_tokens": last.prompt_tokens if last else None,
            "cached_tokens": last.cached_prompt_tokens if last else None,
            "cached_percentage": round(state.cache_hit_pct, 1)
            if state.cache_hit_pct is not None
            else None,
            "miss_reason": last.cache_miss_reason if last else None,
        },
    }


def session_payload(state: StatusState, controller: SessionController, cwd: Path) -> dict[str, Any]:
    """status_payload for the TUI's session as the controller holds it (none yet: no id)."""
    session = controller.session
    return status_payload(
        state,
        controller.usage,
        session_id=session.id if session is not None else None,
        transcript_path=str(session.conversation.path) if session is not None else None,
        cwd=cwd,
        mode=controller.mode,
    )


class StatusLineRunner:
    """Runs COMMAND as the figures change; `on_line(text or None)` with its first line (None:
    it failed, the built-in line comes back) and `on_error(message)` once for a failure."""

    def __init__(
        self,
        command: StatusLineCommand,
        cwd: Path,
        on_line: Callable[[str | None], None],
        on_error: Callable[[str], None],
    ) -> None:
        self.command = command
        self.cwd = cwd
        self.on_line = on_line
        self.on_error = on_error
        self.runs = 0  # how many times the command ran (tests, and a look at the cost)
        self._hook = HookCommand(
            command.command,
            command.timeout_s,
            command.source,
            pins=command.pins,
            sandboxed=command.policy is not None,
        )
        self._sandbox: Sandbox | None = None  # made (probed) off the UI loop at the first run
        self._env = hook_env(cwd)
        self._fed: str | None = None
        self._pending: dict[str, Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_run = float("-inf")
        self._warned = False

    @property
    def busy(self) -> bool:
        """A run is under way or waiting for its turn."""
        return self._task is not None and not self._task.done()

    def feed(self, payload: dict[str, Any]) -> None:
        """New figures (on the UI's event loop). The same ones again run nothing."""
        key = json.dumps(payload, sort_keys=True, default=str)
        if key == self._fed:
            return
        self._fed = key
        self._pending = payload
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        while self._pending is not None:
            wait = self._last_run + MIN_INTERVAL_S - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            payload, self._pending = self._pending, None  # the latest, after the wait
            if payload is None:
                break
            self._last_run = time.monotonic()
            run = await run_hook(self._hook, payload, self.cwd, self._env, await self._box())
            self.runs += 1
            if run.exit_code == 0:
                lines = run.stdout.splitlines()
                first = lines[0].rstrip() if lines else ""
                self.on_line(" " * self.command.padding + first if first else None)
                continue
            self.on_line(None)
            if not self._warned:
                self._warned = True
                why = run.stderr.strip().splitlines()
                said = why[-1] if why else f"exit status {run.exit_code}"
                self.on_error(f"status line command failed ({said}): {self.command.command}")

    async def _box(self) -> Sandbox | None:
        """The sandbox a project's command runs in (None for the user's own)."""
        policy = self.command.policy
        if policy is not None and self._sandbox is None:
            self._sandbox = await asyncio.to_thread(Sandbox, policy)
        return self._sandbox

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
