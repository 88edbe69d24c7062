"""Sandbox.run: one command under the policy's layers, output to files, whole-tree kill."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from m3agent.tools.host_programs import command_path
from m3agent.tools.procs import wait_or_kill
from m3agent.tools.sandbox import boot, bwrap, helper, launch_spec, proxy
from m3agent.tools.sandbox.budget import MIB, Watch, WriteBudget
from m3agent.tools.sandbox.capture import Capture
from m3agent.tools.sandbox.cgroup import Cgroup
from m3agent.tools.sandbox.envscrub import scrub
from m3agent.tools.sandbox.modes_guard import ModeGuard
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxMode, SandboxPolicy
from m3agent.tools.sandbox.report import SandboxReport, probe
from m3agent.tools.sandbox.spec import LaunchSpec

PROXY_IN_SANDBOX = "/run/m3agent-proxy.sock"  # /run is bubblewrap's tmpfs: a fresh name


def _close_proxy(p: proxy.AllowlistProxy) -> None:
    p.close()
    try:
        p.path.parent.rmdir()
    except OSError:
        pass


class SandboxUnavailable(Exception):
    """No confining layer works here and the policy does not allow running unprotected."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    cancelled: bool
    truncated: bool
    stdout_bytes: int
    stderr_bytes: int
    duration_s: float
    killed_by: str  # how leftover processes were ended: "pid-namespace", "cgroup", "subreaper"
    layers: tuple[SandboxLayer, ...]  # the layers this command ran under
    scrubbed_env: tuple[str, ...]
    restored_modes: tuple[str, ...] = ()  # protected files whose mode bits were put back
    # False when the sandbox never got as far as starting the command (a layer failed, the
    # launcher could not be loaded): the exit code and output are then the sandbox's own.
    started: bool = True
    write_budget_exceeded: bool = False  # killed for growing the disk past the session budget
    set_aside: tuple[str, ...] = ()  # what it created under protected file names, renamed


class Sandbox:
    """A policy plus the probed report; `run` executes one command under it."""

    def __init__(
        self, policy: SandboxPolicy, report: SandboxReport | None = None, use_helper: bool = True
    ) -> None:
        from m3agent.tools.sandbox.selfguard import make_undumpable

        make_undumpable()  # the agent's /proc entries (its API keys) closed to commands
        self.policy = policy
        self.budget = WriteBudget(policy.limits.write_budget_mb * MIB)  # for the session
        self.report = report or probe(policy)
        boot.compile_launcher()  # once per session: no command compiles the launcher anew
        # The compiled helper (helper.c) under bubblewrap: no interpreter per command.
        self.helper = helper.build() if use_helper else None
        self.proxy: proxy.AllowlistProxy | None = None  # network = "allowlist": started once

    def allowlist_proxy(self) -> proxy.AllowlistProxy:
        """The session's proxy (host side), on a socket in a private temp dir."""
        if self.proxy is None:
            where = Path(tempfile.mkdtemp(prefix="m3agent-proxy-")) / "proxy.sock"
            self.proxy = proxy.AllowlistProxy(where, self.policy.allowed_domains)
            # closed with the Sandbox (or at exit): no socket or temp dir outlives the session
            weakref.finalize(self, _close_proxy, self.proxy)
        return self.proxy

    @property
    def mode(self) -> SandboxMode:
        return self.policy.mode

    def active_layers(self) -> tuple[SandboxLayer, ...]:
        return tuple(s.name for s in self.report.layers if s.active)

    def run(
        self,
        command: list[str] | str,
        cwd: Path | None = None,
        timeout_s: float = 120.0,
        cancel: threading.Event | None = None,
        env: dict[str, str] | None = None,
        capture: Capture | None = None,
        stdin: bytes | None = None,
    ) -> RunResult:
        """`capture`: the caller's own output files, which it may read while the command
        runs and keeps after it (a background command, tools/background.py); by default
        fresh ones, closed when the command ends. `stdin`: what the command reads on its
        standard input (a hook's event JSON); by default it reads nothing (/dev/null)."""
        if not self.report.protective and not self.policy.dangerously_no_sandbox:
            from m3agent.tools.sandbox.report import PROTECTIVE

            why = "; ".join(self.report.layer(n).detail for n in PROTECTIVE)
            raise SandboxUnavailable(
                f"no sandbox layer is available ({why}); refusing to run the command "
                "(pass --dangerously-no-sandbox to run it unprotected)"
            )
        argv = ["/bin/bash", "-c", command] if isinstance(command, str) else list(command)
        cwd = Path(cwd or self.policy.workspace).resolve()
        layers = list(self.active_layers())
        if SandboxLayer.RLIMITS in layers:
            self.budget.check()  # WriteBudgetSpent: nothing more runs this session
        run_dir = Path(tempfile.mkdtemp(prefix="m3agent-run-"))
        cgroup = None
        try:
            if SandboxLayer.CGROUP in layers:
                try:
                    cgroup = Cgroup.create(self.policy.limits.nproc)
                except OSError:  # probed fine but failed now: fall back, and say so
                    layers.remove(SandboxLayer.CGROUP)
            return self._run_in(
                argv, cwd, timeout_s, cancel, env, tuple(layers), run_dir, cgroup, capture, stdin
            )
        finally:
            if cgroup is not None:
                cgroup.remove()
            shutil.rmtree(run_dir, ignore_errors=True)

    def launch_argv(
        self,
        argv: list[str],
        cwd: Path,
        run_dir: Path,
        env: dict[str, str] | None = None,
        layers: tuple[SandboxLayer, ...] | None = None,
        nproc_watch: bool = True,
        status_fd: int | None = None,
    ) -> tuple[list[str], dict[str, str], list[str]]:
        """(the confined command line, its environment, the variables scrubbed from it).

        Also used for long-lived processes (MCP servers), which the caller starts itself;
        `run_dir` must outlive the process (its box/tmp/ is the command's TMPDIR)."""
        layers = self.active_layers() if layers is None else layers
        # run_dir is the host's (0700, never bound into the sandbox); box/ is the command's.
        box = run_dir / "box"
        tmp = box / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        base_env = dict(os.environ) if env is None else dict(env)
        if env is None:  # the PATH the user gave, not the process's own narrowed one
            base_env["PATH"] = command_path()
        clean_env, removed = (
            scrub(base_env, self.policy.env_allow)
            if SandboxLayer.ENV_SCRUB in layers
            else (base_env, [])
        )
        if self.policy.home is not None:
            clean_env["HOME"] = str(self.policy.home_dir())
        clean_env["TMPDIR"] = str(tmp)
        if (
            self.policy.mode is not SandboxMode.FULL_ACCESS
            and "GIT_CONFIG_GLOBAL" not in self.policy.env_allow
        ):
            # The home directory is hidden: git would die on an unreadable ~/.gitconfig
            # (Landlock answers EACCES, not ENOENT); the user's global config stays out.
            clean_env["GIT_CONFIG_GLOBAL"] = "/dev/null"
        clean_env.pop("PYTHONSTARTUP", None)
        # one file never passes what is left of the session's write budget
        fsize = max(1, min(self.policy.limits.file_size_mb, self.budget.remaining // MIB))
        # (mypy's extra checks refuse a ** item that might hold status_fd or forward: a
        # Confinement is exactly launch_spec.confinement's four keys, and those two are set below)
        spec: LaunchSpec = {
            **launch_spec.confinement(self.policy, layers, box, fsize),  # type: ignore[typeddict-item]
            "tree_kill": SandboxLayer.TREE_KILL in layers,
            "agent_pid": launch_spec.agent_pid(layers),
            # root ignores RLIMIT_NPROC: without a pids cgroup the launcher counts instead
            "nproc_watch": self.policy.limits.nproc
            if nproc_watch and os.geteuid() == 0 and SandboxLayer.TREE_KILL in layers
            else 0,
        }
        if status_fd is not None:
            spec["status_fd"] = status_fd
        binds: tuple[tuple[str, str], ...] = ()
        if launch_spec.allowlist_active(self.policy, layers):
            sock = str(self.allowlist_proxy().path)
            binds = ((sock, PROXY_IN_SANDBOX),)
            spec["forward"] = (proxy.PROXY_PORT, PROXY_IN_SANDBOX)
            url = f"http://127.0.0.1:{proxy.PROXY_PORT}"
            for name in ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY"):
                clean_env[name] = clean_env[name.lower()] = url
            clean_env.pop("NO_PROXY", None)
            clean_env.pop("no_proxy", None)
        helper_exe = (
            self.helper if SandboxLayer.BWRAP in layers and not spec["nproc_watch"] else None
        )
        if "forward" in spec:
            helper_exe = None  # the forwarder lives in the Python launcher
        if helper_exe is not None:  # bubblewrap's pid namespace does the tree kill
            full = helper.argv(helper_exe, spec, status_fd, argv)
        else:
            full = boot.launcher_argv(launch_spec.encode(spec), argv)
        if SandboxLayer.BWRAP in layers:
            full = bwrap.argv(self.policy, run_dir, cwd, binds) + full
        return full, clean_env, list(removed)

    def _run_in(
        self,
        argv: list[str],
        cwd: Path,
        timeout_s: float,
        cancel: threading.Event | None,
        env: dict[str, str] | None,
        layers: tuple[SandboxLayer, ...],
        run_dir: Path,
        cgroup: Cgroup | None,
        given: Capture | None = None,
        stdin: bytes | None = None,
    ) -> RunResult:
        status_r, status_w = os.pipe()
        placeholders, absent = [], []
        if SandboxLayer.BWRAP in layers:  # taken before bubblewrap creates the mount points
            placeholders, absent = bwrap.placeholders(self.policy), bwrap.absent_files(self.policy)
        full, clean_env, removed = self.launch_argv(
            argv, cwd, run_dir, env, layers, nproc_watch=cgroup is None, status_fd=status_w
        )
        if cgroup is not None:
            # Join the group before anything else starts, from a shell that then execs.
            procs = cgroup.path / "cgroup.procs"
            full = ["/bin/sh", "-c", f'echo $$ > "{procs}" && exec "$@"', "m3agent-cg", *full]
        guard = ModeGuard.capture(self.policy) if SandboxLayer.BWRAP not in layers else None
        watch = Watch.start([*self.policy.writable_roots(), run_dir])
        started = time.monotonic()
        timed_out = cancelled = over_budget = False
        own = Capture(self.policy.limits.output_bytes) if given is None else nullcontext(given)
        with own as capture, _input(stdin) as given_stdin:
            try:
                proc = subprocess.Popen(
                    full,
                    cwd=cwd,
                    env=clean_env,
                    stdin=given_stdin,
                    stdout=capture.out,
                    stderr=capture.err,
                    start_new_session=True,
                    close_fds=True,
                    pass_fds=(status_w,),
                )
            except OSError:
                os.close(status_r)
                raise
            finally:
                os.close(status_w)
            deadline = started + timeout_s
            while proc.poll() is None:
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                if time.monotonic() >= deadline:
                    timed_out = True
                    break
                if SandboxLayer.RLIMITS in layers and watch.growth() > self.budget.remaining:
                    over_budget = True
                    break
                try:
                    proc.wait(timeout=0.02)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None:
                _stop(proc)
            out, err = capture.read()  # through our own descriptors, never by path
            if SandboxLayer.RLIMITS in layers:
                net = watch.net()  # before the capture files go
                over_budget = over_budget or net > self.budget.remaining  # ended between polls
                self.budget.charge(net)
        launched = _read_status(status_r) == b"R"
        killed_by = "pid-namespace" if SandboxLayer.BWRAP in layers else "subreaper"
        if cgroup is not None:
            cgroup.kill_all()
            killed_by = "cgroup"
        restored = guard.restore() if guard else []
        bwrap.remove_placeholders(placeholders)
        set_aside = bwrap.set_aside(absent)
        duration = time.monotonic() - started
        code = proc.returncode if proc.returncode is not None else -1
        if code < 0:
            code = 128 - code
        return RunResult(
            exit_code=code,
            stdout=out.text,
            stderr=err.text,
            timed_out=timed_out,
            cancelled=cancelled,
            truncated=out.truncated or err.truncated,
            stdout_bytes=out.size,
            stderr_bytes=err.size,
            duration_s=duration,
            killed_by=killed_by,
            layers=layers,
            scrubbed_env=tuple(removed),
            restored_modes=tuple(restored),
            started=launched,
            write_budget_exceeded=over_budget,
            set_aside=tuple(set_aside),
        )


def _input(data: bytes | None) -> AbstractContextManager[IO[bytes] | int]:
    """The command's standard input: DATA in an unnamed file (written whole before the
    command starts, so no writer thread and no pipe that could block either side), or
    /dev/null."""
    if data is None:
        return nullcontext(subprocess.DEVNULL)
    f = tempfile.TemporaryFile()  # unlinked at once: nothing of it is left on any path
    f.write(data)
    f.seek(0)
    return f


def _read_status(fd: int) -> bytes:
    """What the launcher wrote on the status pipe; never blocks (the run is over)."""
    try:
        os.set_blocking(fd, False)
        return os.read(fd, 16)
    except BlockingIOError:
        return b""
    finally:
        os.close(fd)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the launcher (it kills its tree), then SIGKILL the whole process group."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=2)
    except (subprocess.TimeoutExpired, ProcessLookupError):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    wait_or_kill(proc, 5)
