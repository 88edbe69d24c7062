"""The launcher: `launch SPEC_JSON -- argv...` (started through boot.BOOTSTRAP).

It runs as the sandbox's own small process (never preexec_fn in a threaded parent): it
becomes a child subreaper, forks, and the child applies rlimits, Landlock and seccomp, then
execs the command. The launcher waits for the command; when it ends (or the launcher gets
SIGTERM on a timeout) every remaining descendant is killed, including children that called
setsid or double-forked, since orphans are re-parented to the launcher.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path

EXIT_SANDBOX_FAILED = 125


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        for c in children.get(pid, ()):
            out.append(c)
            todo.append(c)
    return out


def _kill_tree(me: int) -> None:
    for _ in range(200):  # a forking loop refills the tree; repeat until it stays empty
        pids = _descendants(me)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap_all()
        time.sleep(0.005)


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _user_process_count() -> int:
    uid, n = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    n += 1
            except OSError:
                pass
    return n


def _confine(spec: dict) -> None:
    """In the child: rlimits, then Landlock, then seccomp (last, since it limits prctl users)."""
    from m3agent.tools.sandbox.policy import Limits, SandboxMode, SandboxPolicy

    policy = SandboxPolicy.from_json(spec["policy"])
    if spec["rlimits"]:
        from dataclasses import replace

        from m3agent.tools.sandbox import rlimits

        # RLIMIT_NPROC counts all of the user's processes, so allow for those already running.
        limits: Limits = replace(
            policy.limits,
            nproc=policy.limits.nproc + _user_process_count(),
            file_size_mb=spec.get("fsize_mb") or policy.limits.file_size_mb,
        )
        rlimits.apply(limits)
    if spec["landlock"]:
        from m3agent.tools.sandbox.landlock_rules import apply_policy

        apply_policy(policy, Path(spec["run_dir"]), mounts_protect=spec.get("bwrap", False))
    if spec["seccomp"]:
        from m3agent.tools.sandbox import seccomp

        seccomp.install(
            policy.network,
            unix_sockets=spec.get("unix_sockets", False),
            metadata=policy.mode is not SandboxMode.FULL_ACCESS,
        )
    if spec.get("privileges"):
        from m3agent.tools.sandbox import privileges

        privileges.drop_all()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: launch SPEC_JSON -- COMMAND...", file=sys.stderr)
        return 2
    spec = json.loads(argv[0])
    cmd = argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans come back to us

    def on_signal(signum, _frame):
        raise _Stop(signum)  # raising breaks the blocking waitpid, which PEP 475 would retry

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    agent = spec.get("agent_pid")
    if agent and spec.get("tree_kill", True):
        from m3agent.tools.sandbox.privileges import die_with_parent

        # When the agent dies (kill -9 included) we get SIGTERM and kill the whole tree.
        die_with_parent(signal.SIGTERM)
        if os.getppid() != agent:  # it died before the line above took effect
            return 128 + signal.SIGTERM
    status = spec.get("status_fd")  # the host's pipe: "R" once confined, just before exec
    child = os.fork()
    if child == 0:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        if agent and spec.get("tree_kill", True):
            from m3agent.tools.sandbox.privileges import die_with_parent

            die_with_parent(signal.SIGKILL)  # and the command if the launcher itself is killed
        try:
            _confine(spec)
        except Exception as e:  # never run unconfined when a layer was asked for
            os.write(2, f"m3agent sandbox: could not apply a layer: {e}\n".encode())
            os._exit(EXIT_SANDBOX_FAILED)
        if status is not None:
            os.set_inheritable(status, False)  # the command never holds it
            os.write(status, b"R")
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            os.write(2, f"m3agent sandbox: cannot run {cmd[0]}: {e.strerror}\n".encode())
            os._exit(127)
    if status is not None:
        os.close(status)
    me = os.getpid()
    status = None
    watch = int(spec.get("nproc_watch") or 0)
    try:
        while status is None:
            try:
                pid, st = os.waitpid(-1, os.WNOHANG if watch else 0)
            except ChildProcessError:
                break
            if pid == child:
                status = st
            elif watch and pid == 0:
                time.sleep(0.02)
                if len(_descendants(me)) > watch:
                    _kill_tree(me)
                    os.write(
                        2,
                        f"m3agent sandbox: more than {watch} processes; all were killed\n".encode(),
                    )
                    return 128 + signal.SIGKILL
    except _Stop as stop:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)
        _kill_tree(me)
        return 128 + stop.signum
    if spec.get("tree_kill", True):
        _kill_tree(me)  # background processes do not outlive the command
    if status is None:
        return 1
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
