"""The serve lock file: one live server per model, stale locks replaced, stop kills the tree."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from m3agent.app.serve import lock as locks
from m3agent.app.serve.process import descendants, stop_process


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_acquire_refuses_a_live_holder_and_replaces_a_stale_one(tmp_path):
    mine = locks.ServerLock(pid=dead_pid(), model="/m", served_model_name="m", backend="native")
    locks.acquire(tmp_path, mine).close()  # the kernel drops the flock of a dead process
    # its pid is gone: the next server takes the lock over
    live = locks.ServerLock(
        pid=subprocess.os.getpid(),
        model="/m",
        served_model_name="m",
        backend="native",
        port=1234,
        host="127.0.0.1",
        state="ready",
    )
    held = locks.acquire(tmp_path, live)
    assert locks.find_lock(tmp_path, "/m") == live
    assert live.base_url == "http://127.0.0.1:1234/v1"
    other = locks.ServerLock(pid=dead_pid(), model="/m", served_model_name="m", backend="vllm")
    with pytest.raises(ValueError, match=r"already running \(pid"):
        locks.acquire(tmp_path, other)
    # a different model is a different lock
    n = locks.ServerLock(pid=live.pid, model="/n", served_model_name="n", backend="native")
    held_n = locks.acquire(tmp_path, n)
    assert {lk.model for lk in locks.all_locks(tmp_path)} == {"/m", "/n"}
    locks.release(tmp_path, live, held)
    locks.release(tmp_path, n, held_n)
    assert locks.find_lock(tmp_path, "/m") is None
    # Private whatever the umask: the directory 0700, the JSON and the flock file 0600.
    assert (tmp_path / "serve").stat().st_mode & 0o777 == 0o700
    for f in (tmp_path / "serve").iterdir():
        assert f.stat().st_mode & 0o777 == 0o600, f


def test_garbage_lock_is_ignored_and_removed(tmp_path):
    path = locks.lock_path(tmp_path, "/m")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert locks.find_lock(tmp_path, "/m") is None and not path.exists()


def test_stop_process_kills_children_of_a_stubborn_server(tmp_path):
    # A parent that ignores SIGTERM and has a child: both must be gone afterwards.
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "up"
    deadline = time.monotonic() + 10
    while not descendants(p.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    children = descendants(p.pid)
    assert children
    assert stop_process(p.pid, grace_s=0.5) is True
    p.wait(timeout=5)
    assert not any(locks.pid_alive(c) for c in children)


_SECOND_STARTER = """
import sys
from pathlib import Path
from m3agent.app.serve import lock as locks
lk = locks.ServerLock(pid=__import__("os").getpid(), model="/m", served_model_name="m",
                      backend="native")
try:
    locks.acquire(Path(sys.argv[1]), lk)
except ValueError as e:
    print("refused:", e)
else:
    print("acquired")
"""


def test_two_starters_forced_to_interleave_never_both_hold_the_lock(tmp_path):
    """The first starter is stopped right after it took the lock, before it wrote its pid;
    a second starter (a real process) runs in that window and must be refused."""
    second: list[str] = []

    def meanwhile() -> None:
        r = subprocess.run(
            [sys.executable, "-c", _SECOND_STARTER, str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        second.append(r.stdout.strip() or r.stderr)

    first = locks.ServerLock(
        pid=subprocess.os.getpid(), model="/m", served_model_name="m", backend="native"
    )
    held = locks.acquire(tmp_path, first, on_taken=meanwhile)
    try:
        assert second and second[0].startswith("refused:"), second
        assert locks.find_lock(tmp_path, "/m") == first
        # Control: once the first lets go, the same second starter gets it.
        locks.release(tmp_path, first, held)
        second.clear()
        meanwhile()
        assert second == ["acquired"]
    finally:
        held.close()
