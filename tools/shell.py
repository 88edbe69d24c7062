"""shell: run a command through the sandbox (output to files, timeout, whole-tree kill)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from .base import Capability, Preview, PreviewKind, Tool, ToolContext, ToolResult, Touches
from .bounds import preview_text
from .paths import PathDenied, resolve
from .sandbox.budget import WriteBudgetSpent
from .sandbox.runner import SandboxUnavailable

MAX_TIMEOUT_S = 1800.0


class ShellArgs(BaseModel):
    command: str = Field(description="A bash command line, run in the workspace (or workdir).")
    timeout_s: float | None = Field(
        None, gt=0, le=MAX_TIMEOUT_S, description="Seconds before the command is killed."
    )
    workdir: str | None = Field(None, description="Directory to run in (default: the workspace).")


def _workdir(args: ShellArgs, ctx: ToolContext) -> Path | ToolResult:
    if not args.workdir:
        return ctx.cwd
    try:
        cwd = resolve(args.workdir, ctx)
    except PathDenied as e:
        return ToolResult(str(e), is_error=True)
    if not cwd.is_dir():
        return ToolResult(f"workdir {args.workdir}: no such directory", is_error=True)
    return cwd


class Shell(Tool[ShellArgs]):
    name = "shell"
    claude_names = ("Bash",)
    capability = Capability.EXEC
    takes_paths = False
    kind = "execute"
    description = (
        "Run a bash command in the workspace under the sandbox. Returns exit code, stdout and "
        "stderr (long output is cut in the middle). Background processes are killed when the "
        "command ends. Network access is off unless the user enabled it."
    )
    mutates = True

    def touches(self, args: ShellArgs) -> Touches:
        # A command's reach is enforced by the sandbox layers at run time, not predicted.
        return Touches(reads=(args.workdir,) if args.workdir else (), opaque=True)

    def preview(self, args: ShellArgs, ctx: ToolContext) -> Preview:
        cwd = _workdir(args, ctx)
        if isinstance(cwd, ToolResult):
            return Preview(PreviewKind.TEXT, cwd.output, is_error=True)
        timeout = min(args.timeout_s or ctx.timeout_s, MAX_TIMEOUT_S)
        # The directory first: a long command's cut never hides where it runs.
        text, note = preview_text(
            f"cwd: {cwd} (timeout {timeout:g}s)\n$ {args.command}\n", "command"
        )
        return Preview(PreviewKind.COMMAND, text, note)

    def run(self, args: ShellArgs, ctx: ToolContext) -> ToolResult:
        sandbox = ctx.sandbox
        cwd = _workdir(args, ctx)
        if isinstance(cwd, ToolResult):
            return cwd
        timeout = min(args.timeout_s or ctx.timeout_s, MAX_TIMEOUT_S)
        try:
            r = sandbox.run(
                args.command, cwd=cwd, timeout_s=timeout, cancel=ctx.cancel, env=ctx.env
            )
        except SandboxUnavailable as e:
            return ToolResult(str(e), is_error=True, metadata={"blocked_by": "no_sandbox"})
        except WriteBudgetSpent as e:
            return ToolResult(str(e), is_error=True, metadata={"blocked_by": "write_budget"})
        if not r.started:  # never a success, never mistaken for the command's own failure
            why = (r.stderr.strip().splitlines() or [f"exit {r.exit_code}"])[-1]
            return ToolResult(
                f"the sandbox could not start the command (nothing ran): {why}",
                is_error=True,
                metadata={
                    "blocked_by": "sandbox_failed",
                    "exit_code": r.exit_code,
                    "layers": list(r.layers),
                },
            )
        parts = [f"exit code: {r.exit_code}"]
        if r.timed_out:
            parts.append(
                f"[timed out after {timeout:g}s; the command and its children were killed]"
            )
        if r.write_budget_exceeded:
            parts.append(
                f"[killed: the session's commands grew the disk past the write budget "
                f"({sandbox.policy.limits.write_budget_mb} MiB)]"
            )
        if r.cancelled:
            parts.append("[interrupted; the command and its children were killed]")
        if r.stdout:
            parts.append("stdout:\n" + r.stdout.rstrip("\n"))
        if r.stderr:
            parts.append("stderr:\n" + r.stderr.rstrip("\n"))
        if r.set_aside:
            parts.append(
                "[sandbox: commands may not create "
                + ", ".join(Path(p).name.split(".m3agent-blocked-")[0] for p in r.set_aside)
                + "; set aside as "
                + ", ".join(r.set_aside)
                + "]"
            )
        if r.restored_modes:
            parts.append(
                f"[sandbox: restored the permissions of {len(r.restored_modes)} protected file(s)]"
            )
        return ToolResult(
            "\n".join(parts),
            is_error=r.exit_code != 0 or r.timed_out or r.cancelled or r.write_budget_exceeded,
            metadata={
                "exit_code": r.exit_code,
                "timed_out": r.timed_out,
                "truncated": r.truncated,
                "stdout_bytes": r.stdout_bytes,
                "stderr_bytes": r.stderr_bytes,
                "layers": list(r.layers),
                "duration_s": round(r.duration_s, 3),
                "write_budget_exceeded": r.write_budget_exceeded,
            },
        )
