"""What running a hook in the tool sandbox adds: one `true` hook fired through Hooks.fire, on
the host (a user's hook) and in the sandbox (a project's), with bubblewrap and without it
(Landlock), in alternating order, beside the shell tool's own launch of the same `true`
(Sandbox.run, bubblewrap: what the hook's path adds over any sandboxed command). Wall time is the hook's added latency (what a PreToolUse
guard makes a tool call wait); CPU is this process's plus its waited-for children's
(resource.getrusage), which misses what bubblewrap's pid namespace runs: for the sandbox's
whole-tree CPU against a bare bubblewrap see bench/sandbox_launch.py.

    python bench/hook_latency.py [--runs 30] [--out bench/results/hook_latency.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import tempfile
import time
from pathlib import Path

from m3agent.agent.hooks import HookEvent, Hooks, parse_hooks
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox

TABLE = {"PreToolUse": [{"hooks": [{"command": "true"}]}]}
PAYLOAD = {"tool_name": "shell", "tool_input": {"command": "ls"}}


def _cpu() -> float:
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _one(hooks: Hooks | Sandbox) -> tuple[float, float]:
    cpu, wall = _cpu(), time.perf_counter()
    if isinstance(hooks, Sandbox):
        assert hooks.run(["/bin/sh", "-c", "true"], timeout_s=30).exit_code == 0
    else:
        verdict = asyncio.run(hooks.fire(HookEvent.PRE_TOOL_USE, PAYLOAD, tool_name="shell"))
        assert not verdict.blocked and not verdict.failures, verdict
    return time.perf_counter() - wall, _cpu() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    ws = Path(tempfile.mkdtemp(prefix="m3-hookbench-"))
    kinds: dict[str, Hooks | Sandbox] = {"host": Hooks(parse_hooks(TABLE, "user"), ws)}
    for name, off in (("sandbox-bwrap", frozenset()), ("sandbox-landlock", frozenset({"bwrap"}))):
        sb = Sandbox(SandboxPolicy(workspace=ws, disabled_layers=off))
        if name == "sandbox-bwrap" and not sb.report.is_active("bwrap"):
            continue
        kinds[name] = Hooks(parse_hooks(TABLE, "project", repository=True), ws, sandbox=sb)
        if name == "sandbox-bwrap":
            kinds["shell-tool-bwrap"] = sb
    for hooks in kinds.values():
        _one(hooks)  # warm: the launcher's bytecode, the helper, page cache
    got: dict[str, list[tuple[float, float]]] = {k: [] for k in kinds}
    for _ in range(args.runs):
        for name, hooks in kinds.items():
            got[name].append(_one(hooks))
    out = {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load": os.getloadavg(),
        "runs": args.runs,
        "median_ms": {
            k: {
                "wall": round(1000 * statistics.median(w for w, _ in v), 2),
                "cpu": round(1000 * statistics.median(c for _, c in v), 2),
            }
            for k, v in got.items()
        },
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
