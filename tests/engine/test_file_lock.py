"""engine/file_lock.py: a held flock is waited for until the deadline, a free one taken."""

from __future__ import annotations

import fcntl
import time

from m3agent.engine.file_lock import wait_for_flock


def test_a_held_lock_times_out_and_runs_the_wait_hook_between_polls(tmp_path):
    path = tmp_path / "x.lock"
    polls: list[float] = []
    with open(path, "a+b") as holder, open(path, "a+b") as waiter:
        fcntl.flock(holder, fcntl.LOCK_EX)
        started = time.monotonic()
        assert not wait_for_flock(waiter, started + 0.3, lambda: polls.append(1), poll_s=0.05)
        assert time.monotonic() - started >= 0.3
        assert len(polls) >= 3
        fcntl.flock(holder, fcntl.LOCK_UN)
        assert wait_for_flock(waiter, time.monotonic() + 1, lambda: polls.append(2))
    assert 2 not in polls  # free at once: no wait
