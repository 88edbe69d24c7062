"""The machine a placement is planned for: GPU memory and bandwidth, host memory and bandwidth.

Every figure can be given by the user (planning for another machine); what is not given is
probed here: GPU memory through torch when CUDA is present, host memory from /proc/meminfo,
host read bandwidth by timing a multi-threaded sum over a buffer larger than the caches.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30
# Streaming read bandwidth measured on the lent GPUs (bench/PROTOCOL.md); others need --gpu-bw.
KNOWN_GPU_READ_BW = {"H200": 4.47e12, "H100": 3.0e12}
DEFAULT_PCIE_BW = 55e9  # pinned host-to-GPU copies measured on the H200 host (PCIe 5 x16)


@dataclass(frozen=True, slots=True)
class Machine:
    gpu_name: str
    gpu_bytes: int  # total memory of the one GPU the plan uses
    gpu_read_bw: float  # bytes/s
    host_bytes: int  # memory the plan may use (MemAvailable unless given)
    host_read_bw: float  # bytes/s, all cores
    pcie_bw: float  # bytes/s, pinned host -> GPU
    cpu_threads: int
    measured: tuple[str, ...] = ()  # which figures were measured here rather than given


def meminfo_available(path: Path = Path("/proc/meminfo")) -> int:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    raise ValueError("cannot read the host memory from /proc/meminfo: give --host-mem GiB")


def measure_host_read_bw(nbytes: int = 1 * GIB, repeats: int = 3) -> float:
    """Best of a few multi-threaded sums over `nbytes` of int64 (torch, all threads)."""
    import torch

    x = torch.ones(nbytes // 8, dtype=torch.int64)
    x.sum()  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        x.sum()
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


def _probe_gpu() -> tuple[str, int] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return props.name, int(props.total_memory)


def probe(
    gpu_mem_gib: float | None = None,
    gpu_bw_gbs: float | None = None,
    host_mem_gib: float | None = None,
    host_bw_gbs: float | None = None,
    pcie_gbs: float | None = None,
    gpu_name: str | None = None,
) -> Machine:
    """The machine from what was given, probing the rest; a one-line ValueError where a figure
    can be neither probed nor guessed."""
    measured: list[str] = []
    found = _probe_gpu() if gpu_mem_gib is None else None
    if gpu_mem_gib is not None:
        name, gpu_bytes = gpu_name or "GPU", int(gpu_mem_gib * GIB)
    elif found is not None:
        name, gpu_bytes = found
        measured.append("gpu_mem")
    else:
        raise ValueError("no CUDA GPU here: give --gpu-mem GiB (and --gpu-bw GB/s) to plan for one")
    if gpu_bw_gbs is not None:
        gpu_bw = gpu_bw_gbs * 1e9
    else:
        known = [bw for key, bw in KNOWN_GPU_READ_BW.items() if key in name.upper()]
        if not known:
            raise ValueError(f"no read bandwidth known for {name!r}: give --gpu-bw GB/s")
        gpu_bw = known[0]
    if host_mem_gib is not None:
        host = int(host_mem_gib * GIB)
    else:
        host = meminfo_available()
        measured.append("host_mem")
    if host_bw_gbs is not None:
        host_bw = host_bw_gbs * 1e9
    else:
        host_bw = measure_host_read_bw()
        measured.append("host_bw")
    return Machine(
        gpu_name=name,
        gpu_bytes=gpu_bytes,
        gpu_read_bw=gpu_bw,
        host_bytes=host,
        host_read_bw=host_bw,
        pcie_bw=pcie_gbs * 1e9 if pcie_gbs is not None else DEFAULT_PCIE_BW,
        cpu_threads=os.cpu_count() or 1,
        measured=tuple(measured),
    )
