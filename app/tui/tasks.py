"""/tasks (Claude Code's; /ps, Codex's) and ctrl+b: the session's background commands
(tools/background.py). The user lists them, reads the end of one's output, stops one (the
model hears of it with the next prompt), or sends the command a tool call is waiting for to
the background (that call returns, saying so)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from m3agent.tools.shell_jobs import job_listing
from m3agent.tools.toolset import background_jobs

if TYPE_CHECKING:
    from m3agent.tools.background import BackgroundJobs, Job

    from .ports import SessionLike

USAGE = "usage: /tasks [ID | stop ID]"


def _jobs(session: SessionLike | None) -> BackgroundJobs | None:
    return background_jobs(session.toolset) if session is not None else None


async def tasks(session: SessionLike | None, arg: str) -> str:
    """What /tasks ARG answers (ValueError: a usage mistake, said in one line)."""
    jobs = _jobs(session)
    if jobs is None:
        raise ValueError("this session has no shell tool, so no background commands")
    verb, _, rest = arg.strip().partition(" ")
    if not verb:
        listing = job_listing(jobs.jobs())
        return f"{listing}\n/tasks ID shows one's latest output, /tasks stop ID stops it"
    if verb in ("stop", "kill"):
        if not rest.strip():
            raise ValueError(USAGE)
        job = _get(jobs, rest)
        if not job.running:
            return f"{job.id} had already ended ({job.status()})"
        await asyncio.to_thread(job.stop, "the user")
        return f"stopped {job.id} ({job.status()}): {job.command}"
    if rest:
        raise ValueError(USAGE)
    job = _get(jobs, verb)
    tail = await asyncio.to_thread(job.tail)
    return f"{job.id}: {job.status()} after {job.elapsed_s():.1f}s: {job.command}\n" + (
        tail or "(no output yet)"
    )


def _get(jobs: BackgroundJobs, job_id: str) -> Job:
    try:
        return jobs.get(job_id)
    except KeyError as e:
        raise ValueError(str(e.args[0])) from None


def send_to_background(session: SessionLike | None) -> str:
    """ctrl+b: what happened, in one line."""
    jobs = _jobs(session)
    sent = jobs.send_to_background() if jobs is not None else []
    if not sent:
        return "no command is running in the foreground (ctrl+b sends one to the background)"
    ids = ", ".join(j.id for j in sent)
    return (
        f"{ids}: goes on in the background (/tasks lists it; the model reads it with shell_output)"
    )
