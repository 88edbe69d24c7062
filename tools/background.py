"""Commands that outlive their tool call: Claude Code's background shells.

Every shell command runs as a `Job`: a thread that calls `Sandbox.run` (the same layers, the
same whole-tree kill as any command) with output files the job owns (sandbox/capture.py:
anonymous files in the host's temp dir, read by `pread`, never held whole in memory). A
foreground call waits for its job; `run_in_background` returns at once with the job's id;
ctrl+b in the TUI (`BackgroundJobs.send_to_background`) lets a waiting call return early while
its command goes on. The model reads a job's new output (`shell_output`), waits on it or
stops it (`shell_kill`); the user lists and stops them with /tasks. `close()` (the session's
end) kills every job still running.
"""

from __future__ import annotations

import codecs
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .sandbox.capture import Capture

if TYPE_CHECKING:  # types only: the runner loads with the first command
    from .sandbox.runner import RunResult, Sandbox

MAX_RUNNING = 16  # background jobs running at once, per session
READ_BYTES = 32_000  # new output one read returns per stream; the middle of more is skipped
STOP_GRACE_S = 10.0  # how long stop() waits for the sandbox to end the command's tree


class JobLimit(Exception):
    """Too many background jobs are running."""


class _Stream:
    """What the model has read of one output file: a byte offset and a UTF-8 decoder that
    holds back a character cut in two by the end of what was written so far."""

    def __init__(self) -> None:
        self.offset = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def read_new(self, fd: int, final: bool) -> tuple[str, int]:
        """(the new text, bytes skipped in the middle because there was too much)."""
        size = os.fstat(fd).st_size
        new = size - self.offset
        skipped = 0
        if new > READ_BYTES:  # head and tail of what is new, like any cut output
            head = os.pread(fd, READ_BYTES // 2, self.offset)
            skipped = new - READ_BYTES
            tail = os.pread(fd, READ_BYTES // 2, size - READ_BYTES // 2)
            text = self.decoder.decode(head, final=True)
            self.decoder.reset()
            note = f"\n[... {skipped} bytes of output skipped ...]\n"
            text += note + self.decoder.decode(tail, final=final)
        else:
            text = self.decoder.decode(os.pread(fd, new, self.offset) if new else b"", final=final)
        self.offset = size
        return text, skipped


@dataclass(frozen=True, slots=True)
class NewOutput:
    stdout: str
    stderr: str
    skipped: int  # bytes left out of the middle


class Job:
    """One command under the sandbox, in its own thread."""

    def __init__(
        self,
        job_id: str,
        command: str,
        cwd: Path,
        sandbox: Sandbox,
        env: dict[str, str] | None,
        timeout_s: float | None,
        background: bool,
    ) -> None:
        self.id = job_id
        self.command = command
        self.cwd = cwd
        self.timeout_s = timeout_s
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.background = background  # False: a tool call is waiting for it
        self.result: RunResult | None = None
        self.error: Exception | None = None  # the sandbox refused to run it
        self.stopped = False  # by shell_kill, /tasks or the session's end
        self.stopped_by = ""  # "the model", "the user"
        self.end_seen = False  # the model knows it ended (read it since, stopped it, was told)
        self.capture = Capture(sandbox.policy.limits.output_bytes)
        self.cancel = threading.Event()  # stops the command (its whole tree)
        self.detach = threading.Event()  # set: the waiting call returns, the command goes on
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._streams = (_Stream(), _Stream())
        self._thread = threading.Thread(
            target=self._run, args=(sandbox, env), daemon=True, name=f"m3-job-{job_id}"
        )

    def start(self) -> None:
        self._thread.start()

    def _run(self, sandbox: Sandbox, env: dict[str, str] | None) -> None:
        try:
            self.result = sandbox.run(
                self.command,
                cwd=self.cwd,
                timeout_s=self.timeout_s if self.timeout_s is not None else float("inf"),
                cancel=self.cancel,
                env=env,
                capture=self.capture,
            )
        except Exception as e:  # SandboxUnavailable, WriteBudgetSpent, an OSError starting it
            self.error = e
        finally:
            self.ended_at = time.time()
            self.done.set()

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def status(self) -> str:
        """One word or two: running, exit 0, exit 2, timed out, stopped, failed."""
        if self.running:
            return "running"
        r = self.result
        if r is None:
            return "failed"
        if r.cancelled or self.stopped:
            return "stopped"
        if r.timed_out:
            return "timed out"
        return f"exit {r.exit_code}"

    def elapsed_s(self) -> float:
        return (self.ended_at or time.time()) - self.started_at

    def wait(self, timeout_s: float, cancel: threading.Event | None = None) -> bool:
        """Waits until the job ends, `timeout_s` passes or `cancel` is set; whether it ended."""
        deadline = time.monotonic() + timeout_s
        while not self.done.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline or (cancel is not None and cancel.is_set()):
                break
        return self.done.is_set()

    def read_new(self) -> NewOutput:
        """The output written since the last read (the model's reading position)."""
        with self._lock:
            final = self.done.is_set()
            out, s1 = self._streams[0].read_new(self.capture.out.fileno(), final)
            err, s2 = self._streams[1].read_new(self.capture.err.fileno(), final)
            self.end_seen = self.end_seen or final
        return NewOutput(out, err, s1 + s2)

    def unread_bytes(self) -> int:
        return sum(
            os.fstat(f.fileno()).st_size - s.offset
            for f, s in zip((self.capture.out, self.capture.err), self._streams, strict=True)
        )

    def tail(self, cap: int = 4_000) -> str:
        """The last `cap` bytes of each stream written so far (for /tasks; the model's
        reading position stays where it is)."""
        with self._lock:
            parts = [_last(f.fileno(), cap) for f in (self.capture.out, self.capture.err)]
        return "\n".join(p.rstrip("\n") for p in parts if p)

    def stop(self, by: str = "") -> None:
        """Kills the command and its children; returns once they are gone (or after a grace).
        `by`: who asked ("the model" knows it ended; "the user" tells it with the next prompt)."""
        if self.running:
            self.stopped, self.stopped_by = True, by
            self.end_seen = by == "the model"
            self.cancel.set()
            self.done.wait(STOP_GRACE_S)

    def close(self) -> None:
        self.stop()
        if not self.running:
            self.capture.__exit__()


def _last(fd: int, cap: int) -> str:
    size = os.fstat(fd).st_size
    start = max(0, size - cap)
    text = os.pread(fd, size - start, start).decode("utf-8", "replace")
    return ("[...]" + text) if start else text


class BackgroundJobs:
    """The jobs of one session (shared by the shell tools of one toolset)."""

    def __init__(self) -> None:
        self._jobs: dict[str, Job] = {}  # by id: b1, b2, ... (a foreground one: f1, ...)
        self._lock = threading.Lock()
        self._numbers = {"b": 1, "f": 1}
        # at exit too: no command the session started outlives the agent
        self._finalizer = weakref.finalize(self, _close_all, self._jobs)

    def start(
        self,
        command: str,
        cwd: Path,
        sandbox: Sandbox,
        env: dict[str, str] | None = None,
        timeout_s: float | None = None,
        background: bool = False,
    ) -> Job:
        with self._lock:
            if background:
                running = sum(1 for j in self._jobs.values() if j.background and j.running)
                if running >= MAX_RUNNING:
                    raise JobLimit(
                        f"{running} background commands are running (the most at once): "
                        "stop one with shell_kill first"
                    )
            job = Job(self._new_id(background), command, cwd, sandbox, env, timeout_s, background)
            self._jobs[job.id] = job
        job.start()
        return job

    def _new_id(self, background: bool) -> str:
        kind = "b" if background else "f"
        self._numbers[kind] += 1
        return f"{kind}{self._numbers[kind] - 1}"

    def get(self, job_id: str) -> Job:
        """The job with this id, `b2` or just `2` (KeyError naming the ids there are)."""
        job_id = job_id.strip()
        if job_id.isdigit():
            job_id = f"b{job_id}"
        with self._lock:
            job = self._jobs.get(job_id)
            known = [j.id for j in self._jobs.values() if j.background]
        if job is None or not job.background:
            have = ", ".join(known) or "none"
            raise KeyError(f"no background command {job_id!r} (there are: {have})")
        return job

    def jobs(self) -> list[Job]:
        """The background jobs, oldest first (a foreground one joins them when detached)."""
        with self._lock:
            return [j for j in self._jobs.values() if j.background]

    def forget(self, job: Job) -> None:
        """Drops a finished foreground job (its output was returned to the model)."""
        with self._lock:
            if not job.background and not job.running:
                self._jobs.pop(job.id, None)
        if not job.background and not job.running:
            job.capture.__exit__()

    def ended_unseen(self) -> list[Job]:
        """The background jobs that ended since the model last looked; from now on seen."""
        with self._lock:
            ended = [j for j in self._jobs.values() if j.background and not j.running]
            out = [j for j in ended if not j.end_seen]
            for j in out:
                j.end_seen = True
        return out

    def send_to_background(self) -> list[Job]:
        """ctrl+b: every command a tool call is waiting for goes on in the background, and
        its call returns now. The jobs sent."""
        with self._lock:
            sent = [j for j in self._jobs.values() if not j.background and j.running]
            for j in sent:
                del self._jobs[j.id]
                j.id, j.background = self._new_id(True), True
                self._jobs[j.id] = j
                j.detach.set()
        return sent

    def close(self) -> None:
        """Kills every job still running (the session ends)."""
        self._finalizer()


def _close_all(jobs: dict[str, Job]) -> None:
    for job in list(jobs.values()):
        job.cancel.set()  # all at once, then wait for each
    for job in list(jobs.values()):
        job.close()


def filtered(text: str, pattern: re.Pattern[str] | None) -> str:
    if pattern is None or not text:
        return text
    return "".join(line for line in text.splitlines(keepends=True) if pattern.search(line))


def ended_report(jobs: BackgroundJobs | None) -> str:
    """One line per background command that ended since the model last looked (for the next
    prompt, as Claude Code tells its model); "" when none did."""
    if jobs is None:
        return ""
    rows = []
    for job in jobs.ended_unseen():
        how = f"stopped by {job.stopped_by}" if job.stopped_by else job.status()
        unread = job.unread_bytes()
        more = (
            f"; {unread} bytes of output unread (shell_output job_id {job.id!r})" if unread else ""
        )
        rows.append(f"{job.id} ended ({how}) after {job.elapsed_s():.1f}s: {job.command}{more}")
    return "\n".join(rows)
