"""shell: run a command through the sandbox (output to files, timeout, whole-tree kill), in
the foreground or the background (tools/background.py; shell_output and shell_kill read and
stop background commands)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from .background import BackgroundJobs, JobLimit
from .base import Blocker, Capability, Preview, PreviewKind, Tool, ToolContext, ToolResult, Touches
from .bounds import preview_text
from .paths import PathDenied, resolve
from .sandbox.budget import WriteBudgetSpent
from .sandbox.runner import RunResult, Sandbox, SandboxUnavailable

MAX_TIMEOUT_S = 1800.0


class ShellArgs(BaseModel):
    command: str = Field(description="A bash command line, run in the workspace (or workdir).")
    timeout_s: float | None = Field(
        None, gt=0, le=MAX_TIMEOUT_S, description="Seconds before the command is killed."
    )
    workdir: str | None = Field(None, description="Directory to run in (default: the workspace).")
    run_in_background: bool = Field(
        False,
        description="Start the command and return at once with its id (a server, a watcher, "
        "a long build); read its output later with shell_output. No timeout unless timeout_s.",
    )


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
        "stderr (long output is cut in the middle). Processes it leaves behind are killed when "
        "the command ends; for a command that keeps running, set run_in_background. Network "
        "access is off unless the user enabled it."
    )
    mutates = True

    def __init__(self, jobs: BackgroundJobs | None = None) -> None:
        self.jobs = jobs if jobs is not None else BackgroundJobs()

    def touches(self, args: ShellArgs) -> Touches:
        # A command's reach is enforced by the sandbox layers at run time, not predicted.
        return Touches(reads=(args.workdir,) if args.workdir else (), opaque=True)

    def preview(self, args: ShellArgs, ctx: ToolContext) -> Preview:
        cwd = _workdir(args, ctx)
        if isinstance(cwd, ToolResult):
            return Preview(PreviewKind.TEXT, cwd.output, is_error=True)
        if args.run_in_background:
            limit = f"background, timeout {args.timeout_s:g}s" if args.timeout_s else "background"
        else:
            limit = f"timeout {min(args.timeout_s or ctx.timeout_s, MAX_TIMEOUT_S):g}s"
        # The directory first: a long command's cut never hides where it runs.
        text, note = preview_text(f"cwd: {cwd} ({limit})\n$ {args.command}\n", "command")
        return Preview(PreviewKind.COMMAND, text, note)

    def run(self, args: ShellArgs, ctx: ToolContext) -> ToolResult:
        sandbox = ctx.sandbox
        cwd = _workdir(args, ctx)
        if isinstance(cwd, ToolResult):
            return cwd
        if args.run_in_background:
            return self._start_background(args, cwd, ctx)
        timeout = min(args.timeout_s or ctx.timeout_s, MAX_TIMEOUT_S)
        job = self.jobs.start(args.command, cwd, sandbox, ctx.env, timeout)
        while not job.done.wait(0.05):
            if ctx.cancel.is_set():
                job.cancel.set()  # the sandbox kills the tree; the loop waits for the end
            elif job.detach.is_set():  # ctrl+b: the command goes on, the call returns
                return ToolResult(
                    f"moved to the background by the user as {job.id} (still running); "
                    f"read its output with shell_output (job_id {job.id!r})",
                    metadata={"background_id": job.id},
                )
        self.jobs.forget(job)
        if job.error is not None or job.result is None:
            return refused(job.error)
        return report(job.result, timeout, sandbox)

    def _start_background(self, args: ShellArgs, cwd: Path, ctx: ToolContext) -> ToolResult:
        try:
            job = self.jobs.start(
                args.command, cwd, ctx.sandbox, ctx.env, args.timeout_s, background=True
            )
        except JobLimit as e:
            return ToolResult(str(e), is_error=True)
        if job.wait(START_GRACE_S) and job.error is not None:  # refused: nothing runs
            return refused(job.error)
        return ToolResult(
            f"started in the background as {job.id}: read its output with shell_output "
            f"(job_id {job.id!r}), stop it with shell_kill; it is killed when the session ends",
            metadata={"background_id": job.id},
        )


START_GRACE_S = 0.2  # a background start waits this long to report a sandbox refusal


def refused(error: Exception | None) -> ToolResult:
    """The result of a command the sandbox did not run (any other error: raised, and
    Toolset.dispatch reports it as the tool's failure)."""
    if isinstance(error, SandboxUnavailable):
        return ToolResult(str(error), is_error=True, metadata={"blocked_by": Blocker.NO_SANDBOX})
    if isinstance(error, WriteBudgetSpent):
        return ToolResult(str(error), is_error=True, metadata={"blocked_by": Blocker.WRITE_BUDGET})
    raise error or RuntimeError("the command ended without a result")


def report(r: RunResult, timeout: float | None, sandbox: Sandbox) -> ToolResult:
    """A finished command as the model reads it (exit code, notes, output)."""
    if not r.started:  # never a success, never mistaken for the command's own failure
        why = (r.stderr.strip().splitlines() or [f"exit {r.exit_code}"])[-1]
        return ToolResult(
            f"the sandbox could not start the command (nothing ran): {why}",
            is_error=True,
            metadata={
                "blocked_by": Blocker.SANDBOX_FAILED,
                "exit_code": r.exit_code,
                "layers": list(r.layers),
            },
        )
    parts = [f"exit code: {r.exit_code}"]
    if r.timed_out:
        parts.append(
            f"[timed out after {timeout or 0:g}s; the command and its children were killed]"
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
