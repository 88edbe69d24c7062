"""PhaseClock: where a benchmark phase's time went on a NativeEngine (subagents.py).
Imported by name: the scripts put this folder on their path."""

from __future__ import annotations

import os
import time
from pathlib import Path


class PhaseClock:
    """Where a phase's time went: the engine thread's steps (count, seconds, requests per
    step), its CPU time, and the CPU time of the event-loop thread (prompt rendering, parsing,
    the children's sessions). Wraps the engine's step on this instance only."""

    def __init__(self, native_engine) -> None:
        self._llm = native_engine._engine
        self._thread = native_engine._thread
        self.steps: list[tuple[float, int]] = []
        step = self._llm.step

        def timed():
            n = len(self._llm.scheduler.requests)
            t = time.perf_counter()
            out = step()
            self.steps.append((time.perf_counter() - t, n))
            return out

        self._llm.step = timed

    def _engine_cpu_s(self) -> float:
        tid = self._thread.native_id
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def start(self) -> None:
        self._mark = (
            len(self.steps),
            time.thread_time(),
            self._engine_cpu_s(),
            time.perf_counter(),
        )

    def stop(self) -> dict:
        n0, loop0, eng0, wall0 = self._mark
        steps = self.steps[n0:]
        busy = sum(s for s, _ in steps)
        return {
            "wall_s": round(time.perf_counter() - wall0, 3),
            "engine_steps": len(steps),
            "engine_step_s": round(busy, 3),
            "mean_requests_per_step": round(sum(n for _, n in steps) / len(steps), 2)
            if steps
            else 0,
            "engine_thread_cpu_s": round(self._engine_cpu_s() - eng0, 3),
            "event_loop_cpu_s": round(time.thread_time() - loop0, 3),
        }
