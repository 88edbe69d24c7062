"""Put back the mode bits of protected files after a command (the Landlock-only case).

Landlock does not govern chmod/chown, so without bubblewrap's read-only bind a command could
change the permissions of `.git/config`. We record the modes before and restore them after.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from m3agent.tools.sandbox.policy import SandboxPolicy

MAX_ENTRIES = 50_000


@dataclass(slots=True)
class ModeGuard:
    modes: dict[str, tuple[int, int, int]]  # path -> (mode, uid, gid)

    @classmethod
    def capture(cls, policy: SandboxPolicy) -> ModeGuard:
        modes: dict[str, tuple[int, int, int]] = {}
        for prot in policy.protected_paths():
            if not prot.exists():
                continue
            for dirpath, dirnames, filenames in os.walk(prot):
                for name in [".", *dirnames, *filenames]:
                    p = os.path.normpath(os.path.join(dirpath, name))
                    try:
                        st = os.lstat(p)
                    except OSError:
                        continue
                    modes[p] = (st.st_mode, st.st_uid, st.st_gid)
                if len(modes) > MAX_ENTRIES:
                    break
        return cls(modes)

    def restore(self) -> list[str]:
        changed = []
        for p, (mode, uid, gid) in self.modes.items():
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if (st.st_mode, st.st_uid, st.st_gid) == (mode, uid, gid) or os.path.islink(p):
                continue
            try:
                os.chown(p, uid, gid)
                os.chmod(p, mode & 0o7777)
                changed.append(p)
            except OSError:
                continue
        return changed
