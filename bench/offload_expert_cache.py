"""The converted-expert cache at M3's width: first start (convert), second start (map), and
decode from the mapped file when RAM does not hold it.

Builds `ExpertStore.open` over random bf16 experts (16 per layer, hidden 6144, width 3072) in a
temporary cache directory: the first open converts (progress lines on stderr), the second maps.
Then decode steps at batch 1 run twice from the mapped layers: page cache warm, and with the
files' pages dropped before every step (posix_fadvise DONTNEED), which is what a host with less
RAM than its experts sees for every expert its cache has evicted: each step reads the chosen
experts from disk.

    python bench/offload_expert_cache.py [--layers 2] [--form int4] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from m3agent.engine.offload.cpu_experts import CpuExperts, physical_cores  # noqa: E402
from m3agent.engine.offload.cpu_kernel import KernelLoader  # noqa: E402
from m3agent.engine.offload.expert_cache import ExpertStore  # noqa: E402
from m3agent.engine.offload.expert_source import LayerExperts  # noqa: E402
from m3agent.engine.offload.plan import ExpertForm  # noqa: E402
from offload_cpu_experts import environment  # noqa: E402

H, INTER, EXPERTS = 6144, 3072, 16


def source(layer: int) -> LayerExperts:
    """Experts generated on demand, one at a time (as a checkpoint reader hands them over)."""

    def read(e: int):
        g = torch.Generator().manual_seed(layer * 1000 + e)
        mk = lambda *s: (torch.randn(*s, generator=g) * 0.013).bfloat16()  # noqa: E731
        return mk(INTER, H), mk(INTER, H), mk(H, INTER)

    return LayerExperts(EXPERTS, read)


def drop_pages(d: Path) -> None:
    for f in d.glob("*.bin"):
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def decode_ms(experts, layers: list[int], steps: int, before=None) -> float:
    """Median ms of one layer's decode step; `before()` (untimed) may hand back a fresh
    CpuExperts whose pages are not resident."""
    g = torch.Generator().manual_seed(0)
    times = []
    cpu = experts
    for _ in range(steps):
        for layer in layers:
            if before is not None:
                cpu = before()
            x = torch.randn(1, H, generator=g)
            ids = torch.randperm(EXPERTS, generator=g)[:4][None]
            t0 = time.perf_counter()
            cpu.forward(layer, x, ids, torch.full((1, 4), 0.25))
            times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--form", default="int4")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--workdir", default="")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    torch.set_num_threads(physical_cores())
    form, layers = ExpertForm(a.form), list(range(a.layers))
    row = {"bench": "offload_expert_cache", **environment(physical_cores()), "form": a.form,
           "layers": a.layers, "experts_per_layer": EXPERTS, "hidden": H, "inter": INTER}  # fmt: skip
    with tempfile.TemporaryDirectory(dir=a.workdir or None) as tmp:
        t0 = time.perf_counter()
        ExpertStore.open(Path(tmp), "bench", form, layers, source)
        row["first_start_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        mapped = ExpertStore.open(Path(tmp), "bench", form, layers, source)
        row["second_start_s"] = time.perf_counter() - t0
        d = next(Path(tmp).iterdir())
        row["cache_GB"] = sum(f.stat().st_size for f in d.glob("*.bin")) / 1e9
        kernel = KernelLoader()
        cpu = CpuExperts(mapped, kernel=kernel)
        for layer in layers:  # fault every page in once: the warm case
            for e in range(EXPERTS):
                cpu.forward(layer, torch.randn(1, H), torch.tensor([[e]]), torch.ones(1, 1))
        row["decode_ms_per_layer_page_cache_warm"] = decode_ms(cpu, layers, a.steps)

        def cold() -> CpuExperts:
            # a fresh mapping has no page resident in this process; dropping the file's pages
            # from the page cache then makes every expert read come from the disk
            fresh = ExpertStore.open(Path(tmp), "bench", form, layers, source, progress=None)
            drop_pages(d)
            return CpuExperts(fresh, kernel=kernel)

        row["decode_ms_per_layer_from_disk"] = decode_ms(cpu, layers, a.steps, cold)
        row["expert_MB"] = mapped[0].expert_bytes() / 1e6
        row["from_disk_GBps"] = 4 * row["expert_MB"] / row["decode_ms_per_layer_from_disk"]
    print(json.dumps(row), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
