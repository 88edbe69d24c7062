"""The launcher: `launch SPEC -- argv...` (started through boot.BOOTSTRAP).

SPEC is a marshal-ed dict in hex (runner.launch_argv builds it): marshal is built in, where
json would cost the launcher more CPU than bubblewrap's whole start. Only os, signal,
marshal, time and ctypes are imported here and in confine.py, for the same reason.

It runs as the sandbox's own small process (never preexec_fn in a threaded parent): it
becomes a child subreaper, forks, and the child applies rlimits, Landlock and seccomp, then
execs the command. The launcher waits for the command; when it ends (or the launcher gets
SIGTERM on a timeout) every remaining descendant is killed, including children that called
setsid or double-forked, since orphans are re-parented to the launcher.
"""

import ctypes
import marshal
import os
import sys
import time

TYPE_CHECKING = False  # typing is not imported here (see above); mypy reads this as its own
if TYPE_CHECKING:
    import signal  # _signal's names, typed (typeshed has no stub for the C module)

    from m3agent.tools.sandbox.spec import LaunchSpec
else:
    import _signal as signal  # the C module: `signal` would import enum and functools for IntEnum

EXIT_SANDBOX_FAILED = 125
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36


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


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: launch SPEC -- COMMAND...", file=sys.stderr)
        return 2
    spec: LaunchSpec = marshal.loads(bytes.fromhex(argv[0]))
    cmd = argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # orphans come back to us

    def on_signal(signum: int, _frame: object) -> None:
        raise _Stop(signum)  # raising breaks the blocking waitpid, which PEP 475 would retry

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    agent = spec.get("agent_pid")
    if agent and spec.get("tree_kill", True):
        # When the agent dies (kill -9 included) we get SIGTERM and kill the whole tree.
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != agent:  # it died before the line above took effect
            return 128 + signal.SIGTERM
    if spec.get("forward"):  # allow-list mode: the only way out, to the host's proxy
        from m3agent.tools.sandbox import forward

        forward.start(*spec["forward"])
    status = spec.get("status_fd")  # the host's pipe: "R" once confined, just before exec
    child = os.fork()
    if child == 0:
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        if agent and spec.get("tree_kill", True):
            # and the command if the launcher itself is killed
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        try:
            from m3agent.tools.sandbox import confine

            confine.apply(libc, spec)
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
