"""Per-command CPU of the shell tool's sandbox against a bare bubblewrap, side by side.

Each round runs `true` once through `Sandbox.run` (and once more with the Python launcher
instead of the compiled helper, for comparison) (the shell tool's path: host-side setup,
bubblewrap, the launcher, Landlock/seccomp/privileges, exec) and once as a bare
`bwrap --ro-bind / / true`, in alternating order. CPU is read from a cgroup v1 cpuacct group
(or a cgroup v2 group's cpu.stat) that holds the calling thread, so every process either run
starts is counted, including those in bubblewrap's pid namespace that rusage never sees.
The calling thread's own CPU (time.thread_time) is reported too, so the host-side share and
the spawned tree's share can be told apart.

    python bench/sandbox_launch.py [--runs 40] [--out bench/results/sandbox_launch.json]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.report import probe
from m3agent.tools.sandbox.runner import Sandbox

BARE = ["bwrap", "--ro-bind", "/", "/", "true"]


class CpuGroup:
    """A cgroup the measuring thread lives in; usage_ns() is the CPU of all its members."""

    def __init__(self) -> None:
        v1 = Path("/sys/fs/cgroup/cpuacct")
        name = f"m3bench-{uuid.uuid4().hex[:8]}"
        if (v1 / "cpuacct.usage").exists():
            self.path, self.v1 = v1 / name, True
        else:
            rel = Path("/proc/self/cgroup").read_text().split("::", 1)[1].strip()
            self.path, self.v1 = Path("/sys/fs/cgroup") / rel.lstrip("/") / name, False
        self.path.mkdir()

    def join_thread(self) -> None:
        # v1 moves one thread (tasks); v2 threaded mode is rarely delegated, so a v2 group
        # takes the whole process (cgroup.procs) and the host-side share includes all threads.
        tid = threading.get_native_id()
        target = "tasks" if self.v1 else "cgroup.procs"
        (self.path / target).write_text(str(tid if self.v1 else os.getpid()))

    def usage_ns(self) -> int:
        if self.v1:
            return int((self.path / "cpuacct.usage").read_text())
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) * 1000

    def remove(self) -> None:
        parent = self.path.parent / ("tasks" if self.v1 else "cgroup.procs")
        parent.write_text(str(threading.get_native_id() if self.v1 else os.getpid()))
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.02)


def _measure(group: CpuGroup, fn) -> tuple[float, float]:
    c0, t0 = group.usage_ns(), time.thread_time_ns()
    fn()
    return (group.usage_ns() - c0) / 1e6, (time.thread_time_ns() - t0) / 1e6


def _med(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def run(runs: int) -> dict:
    ws = Path(tempfile.mkdtemp(prefix="m3bench-ws-"))
    sb = Sandbox(SandboxPolicy(workspace=ws))
    report = probe(sb.policy)
    py = Sandbox(sb.policy, report, use_helper=False)  # the Python launcher, for comparison
    group = CpuGroup()
    rows: dict[str, list[tuple[float, float]]] = {"sandbox": [], "bare": [], "python_launcher": []}

    def sandbox_true():
        r = sb.run(["true"], cwd=ws, timeout_s=30)
        assert r.exit_code == 0 and r.started, r.stderr

    def python_true():
        r = py.run(["true"], cwd=ws, timeout_s=30)
        assert r.exit_code == 0 and r.started, r.stderr

    def bare_true():
        subprocess.run(BARE, check=True)

    try:
        group.join_thread()
        for _ in range(3):  # warm the page cache and the bytecode caches
            sandbox_true()
            bare_true()
        for i in range(runs):
            order = (
                ("sandbox", sandbox_true),
                ("bare", bare_true),
                ("python_launcher", python_true),
            )
            for name, fn in order if i % 2 == 0 else order[::-1]:
                rows[name].append(_measure(group, fn))
    finally:
        group.remove()
    sand_cpu = [c for c, _ in rows["sandbox"]]
    sand_host = [t for _, t in rows["sandbox"]]
    bare_cpu = [c for c, _ in rows["bare"]]
    bare_host = [t for _, t in rows["bare"]]
    py_cpu = [c for c, _ in rows["python_launcher"]]
    tree = [c - t for c, t in rows["sandbox"]]
    bare_tree = [c - t for c, t in rows["bare"]]
    return {
        "bench": "sandbox_launch",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "layers": [s.name for s in report.layers if s.active],
        "helper": str(sb.helper) if sb.helper else None,
        "runs": runs,
        "cpu_ms_median": {
            "sandbox_total": _med(sand_cpu),
            "sandbox_host_thread": _med(sand_host),
            "sandbox_spawned_tree": _med(tree),
            "bare_bwrap_total": _med(bare_cpu),
            "bare_bwrap_host_thread": _med(bare_host),
            "bare_bwrap_spawned_tree": _med(bare_tree),
            "python_launcher_total": _med(py_cpu),
        },
        "ratio_total": round(_med(sand_cpu) / _med(bare_cpu), 2),
        "ratio_spawned_tree": round(_med(tree) / _med(bare_tree), 2),
        "ratio_python_launcher_total": round(_med(py_cpu) / _med(bare_cpu), 2),
        "raw_ms": {k: [[round(c, 3), round(t, 3)] for c, t in v] for k, v in rows.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--out", default="bench/results/sandbox_launch.json")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    result = run(args.runs)
    result["label"] = args.label
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "raw_ms"}, indent=1))


if __name__ == "__main__":
    main()
