"""Resource limits for the launcher's child (confine.rlimits applies them)."""

from __future__ import annotations

import resource

from m3agent.tools.sandbox.policy import Limits


def pairs(limits: Limits) -> list[tuple[int, int, int]]:
    """(resource, limit, what the hard limit adds) each. CPU: the soft limit sends SIGXCPU
    (a clear cause), the hard one 2 s later SIGKILL. The launcher caps each by the hard
    limit it inherited, and adds the user's running processes to RLIMIT_NPROC."""
    mb = 1024 * 1024
    return [
        (resource.RLIMIT_CPU, limits.cpu_s, 2),
        (resource.RLIMIT_AS, limits.address_space_mb * mb, 0),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * mb, 0),
        (resource.RLIMIT_NPROC, limits.nproc, 0),
        (resource.RLIMIT_CORE, 0, 0),
    ]
