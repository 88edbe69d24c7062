"""The compiled CPU MoE kernel: built at first use, cached on disk, optional.

Only offloading calls `load_kernel()`; a user who never offloads never needs a compiler. When
the CPU lacks AVX-512 VNNI/BF16, no C++ compiler is found, or the build fails, it returns None
and `CpuExperts` computes with torch ops instead (same results, slower), saying why once on
stderr. The build lands in the user's cache directory, keyed by a hash of the source and
flags, so a second process loads it in well under a second.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

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


def build_kernel(build_root: Path | None = None, verbose: bool = False) -> KernelStatus:
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


__all__ = ["FORM_CODE", "KernelLoader", "KernelStatus", "build_kernel"]
