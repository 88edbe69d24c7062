"""How a benchmark shares a loaded machine: `realtime()` puts this process (its threads, and
the processes it starts, which inherit the policy) under SCHED_FIFO, so on a shared 2-core
machine the other processes get ~5% of the CPU while it runs; `scheduler()` names the policy
for the result's JSON. Needs root or CAP_SYS_NICE."""

from __future__ import annotations

import os


def realtime(priority: int = 50) -> None:
    param = os.sched_param(priority)
    for tid in os.listdir("/proc/self/task"):
        os.sched_setscheduler(int(tid), os.SCHED_FIFO, param)


def scheduler() -> str:
    policy = os.sched_getscheduler(0)
    if policy == os.SCHED_FIFO:
        return f"SCHED_FIFO {os.sched_getparam(0).sched_priority}"
    return "SCHED_RR" if policy == os.SCHED_RR else "default"
