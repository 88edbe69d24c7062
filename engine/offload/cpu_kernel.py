"""The compiled CPU MoE kernel: built at first use, cached on disk, optional.

Only offloading calls `load_kernel()`; a user who never offloads never needs a compiler. When
the CPU lacks AVX-512 VNNI/BF16, no C++ compiler is found, or the build fails, it returns None
and `CpuExperts` computes with torch ops instead (same results, slower), saying why once on
stderr. The build lands in the user's cache directory, keyed by a hash of the source and
flags, so a second process loads it in well under a second.

Processes that start together (test workers, two sessions) build it once: the first takes an
advisory lock beside the build folder, the others wait for it (at most `BUILD_WAIT_S`) and load
its result. The lock is the kernel's, released when its holder dies, so a build killed halfway
never blocks later ones (torch's own lock file would: it stays behind and is waited on forever).

`python -m m3agent.engine.offload.cpu_kernel` builds it ahead of time and says where, or why not.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ..file_lock import wait_for_flock
from .cpu_kernel_src import SOURCE

# The ISA the kernel is written for (Ice Lake / Sapphire Rapids / Zen 4 and later).
NEEDED_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16")
CFLAGS = (
    "-O3",
    "-fopenmp",
    "-mavx512f",
    "-mavx512bw",
    "-mavx512vl",
    "-mavx512dq",
    "-mavx512vnni",
    "-mavx512bf16",
)

# how long a process waits for another one's build of the same kernel before it gives up on it
BUILD_WAIT_S = 900.0

# form codes of the kernel (cpu_kernel_src.py)
FORM_CODE = {"int8": 0, "int4": 1, "mxfp8": 2, "bf16": 3}


@dataclass(frozen=True, slots=True)
class KernelStatus:
    module: ModuleType | None
    reason: str  # why there is no module, or where it was built


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cache_root() -> Path:
    """Where compiled kernels live (M3AGENT_KERNEL_CACHE overrides, for tests and CI)."""
    env = os.environ.get("M3AGENT_KERNEL_CACHE")
    if env:
        return Path(env)
    try:
        from platformdirs import user_cache_dir
    except ImportError:  # the engine runs without the app's packages (a GPU image, a bench)
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        return Path(base) / "m3agent" / "kernels"
    return Path(user_cache_dir("m3agent")) / "kernels"


@contextmanager
def _build_lock(path: Path, wait_s: float) -> Iterator[bool]:
    """Holds an exclusive flock on `path` (True), or yields False once `wait_s` has passed."""
    with open(path, "a+b") as handle:
        if not wait_for_flock(handle, time.monotonic() + wait_s):
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_kernel(
    build_root: Path | None = None, verbose: bool = False, wait_s: float = BUILD_WAIT_S
) -> KernelStatus:
    """Compile (or load the cached build of) the kernel; never raises."""
    missing = [f for f in NEEDED_FLAGS if f not in cpu_flags()]
    if missing:
        return KernelStatus(None, f"CPU lacks {', '.join(missing)}")
    if os.environ.get("M3AGENT_NO_CPU_KERNEL"):
        return KernelStatus(None, "M3AGENT_NO_CPU_KERNEL is set")
    if not (shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")):
        return KernelStatus(None, "no C++ compiler found")
    import torch

    key = hashlib.sha256((SOURCE + " ".join(CFLAGS) + torch.__version__).encode()).hexdigest()
    name = f"m3agent_cpu_moe_{key[:16]}"
    root = (build_root or cache_root()) / name
    root.mkdir(parents=True, exist_ok=True)
    with _build_lock(root.with_name(name + ".lock"), wait_s) as held:
        if not held:
            return KernelStatus(
                None, f"another process has been building {root} for {wait_s:.0f} s"
            )
        # Every builder holds the lock above first, so a torch lock file found now was left by
        # a build that died; load_inline would wait on it forever.
        (root / "lock").unlink(missing_ok=True)
        try:
            from torch.utils.cpp_extension import load_inline

            mod = load_inline(
                name=name,
                cpp_sources=[SOURCE],
                functions=["moe_forward"],
                extra_cflags=list(CFLAGS),
                extra_ldflags=["-fopenmp"],
                build_directory=str(root),
                verbose=verbose,
            )
        except Exception as e:  # a broken toolchain must not take the engine down
            return KernelStatus(None, f"build failed: {type(e).__name__}: {str(e)[-400:]}")
    return KernelStatus(mod, str(root))


class KernelLoader:
    """Builds once per process (owned by whoever offloads; no module-level state)."""

    def __init__(self, build_root: Path | None = None) -> None:
        self._root = build_root
        self._status: KernelStatus | None = None

    def status(self) -> KernelStatus:
        if self._status is None:
            self._status = build_kernel(self._root)
            if self._status.module is None:
                print(
                    f"m3agent: CPU expert kernel unavailable ({self._status.reason}); "
                    "using torch ops",
                    file=sys.stderr,
                )
        return self._status

    def module(self) -> ModuleType | None:
        return self.status().module


def main() -> int:
    """Builds the kernel now (set-up scripts, CI); exit 0 whether or not this CPU can use it."""
    started = time.monotonic()
    status = build_kernel()
    took = time.monotonic() - started
    if status.module is None:
        print(f"m3agent: no CPU expert kernel ({status.reason}); offloading uses torch ops")
    else:
        print(f"m3agent: CPU expert kernel ready in {status.reason} ({took:.0f} s)")
    return 0


__all__ = ["BUILD_WAIT_S", "FORM_CODE", "KernelLoader", "KernelStatus", "build_kernel"]

if __name__ == "__main__":
    sys.exit(main())
