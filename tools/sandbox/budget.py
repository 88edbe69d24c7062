"""The session's write budget: how much the commands may grow the disks they can write to.

RLIMIT_FSIZE caps one file; it does not stop three 0.9 GB files under a 1 GiB limit. So the
runner also watches the free space of every file system a command can write (the writable
roots and the run dir that holds $TMPDIR and the captured output) while it runs, and kills it
once the session's net growth passes the budget. Free space is what the kernel reports
(statvfs, which counts delayed allocation), so a command's deletions give budget back, and
writes by other programs to the same file systems during a command are charged to it (a
false alarm costs one command; a disk filled costs the machine). The watch polls every
20 ms: a command can overshoot by what it writes in that time. `RLIMIT_FSIZE` is also set to
no more than what is left, so one file can never pass the budget.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1024 * 1024


class WriteBudgetSpent(Exception):
    """The session has no write budget left; no command runs until the user raises it."""


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@dataclass(slots=True)
class Watch:
    paths: dict[int, Path]  # st_dev -> a path on that file system
    before: dict[int, int] = field(default_factory=dict)

    @classmethod
    def start(cls, paths: list[Path]) -> Watch:
        devs: dict[int, Path] = {}
        for p in paths:
            try:
                devs.setdefault(os.stat(p).st_dev, p)
            except OSError:
                continue
        w = cls(devs)
        w.before = {dev: _free(p) for dev, p in devs.items()}
        return w

    def _deltas(self) -> list[int]:
        out = []
        for dev, p in self.paths.items():
            try:
                out.append(self.before[dev] - _free(p))
            except OSError:
                continue
        return out

    def growth(self) -> int:
        """Bytes of growth so far (file systems that shrank count as zero)."""
        return sum(d for d in self._deltas() if d > 0)

    def net(self) -> int:
        return sum(self._deltas())


@dataclass(slots=True)
class WriteBudget:
    limit: int  # bytes
    used: int = 0

    @property
    def remaining(self) -> int:
        return self.limit - self.used

    def check(self) -> None:
        if self.remaining < MIB:
            raise WriteBudgetSpent(
                f"the session's write budget ({self.limit // MIB} MiB) is spent: commands have "
                f"grown the disk by {self.used // MIB} MiB; delete what they wrote or start a "
                "new session with a larger write_budget_mb"
            )

    def charge(self, net: int) -> None:
        self.used = max(0, self.used + net)
