"""Hooks: fire an event at every matching command and fold their answers into one verdict.

The answers follow Claude Code's contract, so its hook scripts work unchanged:
- exit 0: fine; stdout that is a JSON object is read as the answer (below); for
  UserPromptSubmit and SessionStart plain stdout is context for the model;
- exit 2: block; stderr is the reason (fed to the model for tool and Stop events, shown to the
  user for a blocked prompt);
- any other exit or a timeout: the hook failed, reported to the user, nothing blocked;
- a hook that ran in the sandbox (a project's: what it runs may be the model's, confined.py)
  may block, deny, ask or add context, but its "allow" skips no approval: it is ignored;
- JSON: "decision": "block" (+ "reason"), "continue": false (+ "stopReason"), and
  "hookSpecificOutput" {"permissionDecision": allow|deny|ask, "permissionDecisionReason",
  "updatedInput", "additionalContext"}.
Matching commands of one event run concurrently, like Claude Code's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import PermissionMode
from .config import HookEvent, HookSet
from .confined import default_sandbox, read_only
from .runner import HookRun, hook_env, run_hook

if TYPE_CHECKING:
    from m3agent.tools.sandbox.runner import Sandbox

    from ..approvals import ApprovalGate

# Where each hook's run is reported (an agent event: the front ends show it).
Report = Callable[[HookEvent, HookRun], Awaitable[None]]
_STDOUT_IS_CONTEXT = frozenset({HookEvent.USER_PROMPT_SUBMIT, HookEvent.SESSION_START})


@dataclass(frozen=True, slots=True)
class HookVerdict:
    blocked: bool = False
    reason: str = ""
    permission: str | None = None  # "allow" | "deny" | "ask" (PreToolUse)
    updated_input: dict[str, Any] | None = None
    additional_context: tuple[str, ...] = ()
    stop: bool = False  # "continue": false: end the turn
    stop_reason: str = ""
    failures: tuple[str, ...] = ()  # hooks that failed (not blocking), one line each

    @property
    def context_text(self) -> str:
        return "\n".join(c for c in self.additional_context if c.strip())


NO_HOOKS = HookVerdict()


class Hooks:
    """The session's hooks: `hooks` holds only what may run (the front end applied trust:
    app/hooks_settings.py); `env` is scrubbed here whatever is passed. `sandbox`: the
    session's, where the project's hooks run (confined.py); without one, the default
    policy's over the project, made when such a hook first runs."""

    def __init__(
        self,
        hooks: HookSet,
        project: Path,
        env: Mapping[str, str] | None = None,
        sandbox: Sandbox | None = None,
    ):
        self.hooks = hooks
        self.project = Path(project)
        self.env = hook_env(self.project, env)
        self._sandbox = sandbox
        self._read_only: Sandbox | None = None
        self._gate: ApprovalGate | None = None

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = default_sandbox(self.project)
        return self._sandbox

    def follow(self, gate: ApprovalGate) -> None:
        """The session's gate, whose permission mode is read at every event: in plan mode
        the sandboxed hooks run read-only, as plan mode lets the model change nothing."""
        self._gate = gate

    def _box(self) -> Sandbox:
        if self._gate is None or self._gate.mode is not PermissionMode.PLAN:
            return self.sandbox
        if self._read_only is None:
            self._read_only = read_only(self.sandbox)
        return self._read_only

    def has(self, event: HookEvent, tool_name: str | None = None) -> bool:
        return bool(self.hooks.commands(event, tool_name))

    async def fire(
        self,
        event: HookEvent,
        payload: Mapping[str, Any],
        *,
        tool_name: str | None = None,
        report: Report | None = None,
    ) -> HookVerdict:
        commands = self.hooks.commands(event, tool_name)
        if not commands:
            return NO_HOOKS
        body = {"hook_event_name": str(event), "cwd": str(self.project), **payload}
        sandbox = self._box() if any(c.sandboxed for c in commands) else None
        runs = await asyncio.gather(
            *(run_hook(c, body, self.project, self.env, sandbox) for c in commands)
        )
        if report is not None:
            for r in runs:
                await report(event, r)
        return fold(event, runs)


def fold(event: HookEvent, runs: list[HookRun] | tuple[HookRun, ...]) -> HookVerdict:
    blocked, stop = False, False
    reasons: list[str] = []
    context: list[str] = []
    failures: list[str] = []
    permission: str | None = None
    updated: dict[str, Any] | None = None
    stop_reason = ""
    for r in runs:
        if r.blocking:
            blocked = True
            reasons.append(r.stderr.strip() or f"blocked by hook: {r.command}")
            continue
        if r.exit_code != 0:
            why = "timed out" if r.timed_out else f"exit {r.exit_code}"
            failures.append(f"{event} hook `{r.command}` failed ({why}): {r.stderr.strip()[:300]}")
            continue
        a = r.answer
        if not a:
            if event in _STDOUT_IS_CONTEXT and r.stdout.strip():
                context.append(r.stdout.strip())
            continue
        specific = a.get("hookSpecificOutput")
        specific = specific if isinstance(specific, dict) else {}
        if a.get("continue") is False:
            stop = True
            stop_reason = str(a.get("stopReason") or "stopped by a hook")
        decision = a.get("decision")
        perm = specific.get("permissionDecision")
        if decision == "approve":  # Claude Code's older spelling of allow
            perm = perm or "allow"
        if perm == "allow" and r.sandboxed:
            perm = None  # the model may have written what it ran: it never widens
        if decision == "block" or perm == "deny":
            blocked = True
            reasons.append(
                str(a.get("reason") or specific.get("permissionDecisionReason") or "blocked")
            )
        if perm in ("allow", "deny", "ask"):
            # The strictest answer wins: deny over ask over allow.
            order = {"allow": 0, "ask": 1, "deny": 2}
            if permission is None or order[perm] > order[permission]:
                permission = perm
        if isinstance(specific.get("updatedInput"), dict):
            updated = {**(updated or {}), **specific["updatedInput"]}
        extra = specific.get("additionalContext")
        if isinstance(extra, str) and extra.strip():
            context.append(extra.strip())
        elif (
            decision != "block"
            and isinstance(a.get("reason"), str)
            and event in (HookEvent.POST_TOOL_USE,)
        ):
            context.append(a["reason"])
    return HookVerdict(
        blocked=blocked,
        reason="\n".join(reasons),
        permission=permission,
        updated_input=updated,
        additional_context=tuple(context),
        stop=stop,
        stop_reason=stop_reason,
        failures=tuple(failures),
    )
