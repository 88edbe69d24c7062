"""Resource limits applied in the launcher before the command starts."""

from __future__ import annotations

import resource

from m3agent.tools.sandbox.policy import Limits


def apply(limits: Limits) -> None:
    mb = 1024 * 1024
    pairs = (
        (resource.RLIMIT_CPU, limits.cpu_s),
        (resource.RLIMIT_AS, limits.address_space_mb * mb),
        (resource.RLIMIT_FSIZE, limits.file_size_mb * mb),
        (resource.RLIMIT_NPROC, limits.nproc),
        (resource.RLIMIT_CORE, 0),
    )
    for which, value in pairs:
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        # CPU: the soft limit sends SIGXCPU (a clear cause), the hard one 2 s later SIGKILL.
        new_hard = value + 2 if which == resource.RLIMIT_CPU else value
        if hard != resource.RLIM_INFINITY:
            new_hard = min(new_hard, hard)
        resource.setrlimit(which, (value, new_hard))
