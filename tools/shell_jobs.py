"""shell_output and shell_kill: the model's side of background commands (Claude Code's
BashOutput and KillShell). Both share the shell tool's BackgroundJobs (tools/background.py)."""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from .background import BackgroundJobs, Job, filtered
from .base import Tool, ToolContext, ToolResult, Touches
from .shell import refused

MAX_WAIT_S = 600.0


class ShellOutputArgs(BaseModel):
    job_id: str | None = Field(
        None,
        description="The id shell gave a background command (b1, b2, ...). Omit it to list "
        "every background command with its state.",
    )
    wait_s: float = Field(
        0,
        ge=0,
        le=MAX_WAIT_S,
        description="Wait up to this many seconds for the command to finish first (returns as "
        "soon as it does).",
    )
    filter: str | None = Field(
        None,
        description="A regular expression: only new lines matching it are shown (the others "
        "are read and skipped).",
    )


class ShellKillArgs(BaseModel):
    job_id: str = Field(description="The id of the background command to stop (b1, ...).")


def _state(job: Job) -> str:
    return f"{job.id}: {job.status()} after {job.elapsed_s():.1f}s"


def _headline(job: Job) -> str:
    return f"{_state(job)}, in {job.cwd}: {job.command}"


def job_listing(jobs: list[Job]) -> str:
    if not jobs:
        return "no background commands"
    return "\n".join(_headline(j) for j in jobs)


class ShellOutput(Tool[ShellOutputArgs]):
    name = "shell_output"
    claude_names = ("BashOutput",)
    takes_paths = False
    kind = "read"
    description = (
        "Read what a background command (shell with run_in_background) wrote since the last "
        "read, with its state (running, or its exit code); optionally wait for it to finish "
        "first. Without job_id: list the background commands."
    )

    def __init__(self, jobs: BackgroundJobs) -> None:
        self.jobs = jobs

    def touches(self, args: ShellOutputArgs) -> Touches:
        return Touches()  # no file: only output the session's own commands wrote

    def run(self, args: ShellOutputArgs, ctx: ToolContext) -> ToolResult:
        if args.job_id is None:
            return ToolResult(job_listing(self.jobs.jobs()))
        try:
            pattern = re.compile(args.filter) if args.filter else None
        except re.error as e:
            return ToolResult(f"filter {args.filter!r} is not a regular expression: {e}", True)
        try:
            job = self.jobs.get(args.job_id)
        except KeyError as e:
            return ToolResult(str(e.args[0]), is_error=True)
        if args.wait_s:
            job.wait(args.wait_s, ctx.cancel)
        if job.error is not None:
            return refused(job.error)
        new = job.read_new()
        parts = [_state(job)]
        out, err = filtered(new.stdout, pattern), filtered(new.stderr, pattern)
        if out:
            parts.append("stdout (new):\n" + out.rstrip("\n"))
        if err:
            parts.append("stderr (new):\n" + err.rstrip("\n"))
        if not (new.stdout or new.stderr):
            parts.append("(no new output)")
        elif not (out or err):
            parts.append("(no new line matches the filter)")
        r = job.result
        if r is not None and not r.started:
            parts.append("[the sandbox could not start the command: nothing ran]")
        return ToolResult(
            "\n".join(parts),
            metadata={
                "background_id": job.id,
                "status": job.status(),
                "exit_code": r.exit_code if r is not None else None,
                "skipped_bytes": new.skipped,
            },
        )


class ShellKill(Tool[ShellKillArgs]):
    name = "shell_kill"
    claude_names = ("KillShell",)
    takes_paths = False
    kind = "execute"
    description = "Stop a background command (and every process it started) by its id."

    def __init__(self, jobs: BackgroundJobs) -> None:
        self.jobs = jobs

    def touches(self, args: ShellKillArgs) -> Touches:
        return Touches()

    def run(self, args: ShellKillArgs, ctx: ToolContext) -> ToolResult:
        try:
            job = self.jobs.get(args.job_id)
        except KeyError as e:
            return ToolResult(str(e.args[0]), is_error=True)
        if not job.running:
            return ToolResult(f"{job.id} had already ended ({job.status()})")
        job.stop(by="the model")
        return ToolResult(f"stopped {_headline(job)}", metadata={"background_id": job.id})
