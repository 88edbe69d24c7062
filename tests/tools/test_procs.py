"""wait_or_kill: a child that exits in time keeps its status; one that does not is killed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from m3agent.tools.procs import wait_or_kill


def test_a_child_that_exits_in_time_keeps_its_status():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    assert wait_or_kill(proc, 10) == 3


def test_a_child_that_hangs_is_killed_and_reaped_after_the_timeout():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    assert wait_or_kill(proc, 0.3) == -signal.SIGKILL
    assert time.monotonic() - started < 10
    assert proc.poll() == -signal.SIGKILL  # reaped: no zombie left behind
