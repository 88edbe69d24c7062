"""offload_decode, CPU half: M3's routed experts computed on the host at full width.

Per MoE layer at decode, the CPU reads the 4 chosen experts (3 x 6144 x 3072 weights each) from
host memory. On a shared machine the read bandwidth swings by 3x within a minute, so every
sample is paired with a bandwidth check taken right before it (multi-threaded sum over a buffer
far larger than the caches), and a sample's share is its bytes over its time over that check.
Rows report the best pair (the machine at its least disturbed), the median pair, and both
times. Forms: int8 / int4 / mxfp8 / bf16 through `CpuExperts.forward` (the compiled kernel
when it builds; `--torch` for the torch-ops path), batch 1 and 8.

    python bench/offload_cpu_experts.py [--experts 16] [--pairs 8] [--out FILE]

Host memory: experts x 56.6 MB (int8), 30 MB (int4), 58.4 MB (mxfp8), 113 MB (bf16).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from m3agent.engine.offload.cpu_experts import CpuExperts, HostExpertLayer, physical_cores
from m3agent.engine.offload.plan import ExpertForm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scheduling import scheduler  # noqa: E402


def host_read_bw(buf: torch.Tensor, repeats: int = 3) -> float:
    """Bytes/s of the best of a few multi-threaded sums over `buf` (>> last-level cache)."""
    best = min(_timed(buf.sum) for _ in range(repeats))
    return buf.numel() * buf.element_size() / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def random_layer(form: ExpertForm, experts: int, h: int, inter: int, seed: int) -> HostExpertLayer:
    """Random bytes written straight in the tiled host form (quantising 113 MB per expert
    through fp32 would take longer than the benchmark); speed does not depend on values."""
    g = torch.Generator().manual_seed(seed)

    def rb(*shape: int, hi: int = 256) -> torch.Tensor:
        return torch.randint(0, hi, shape, generator=g, dtype=torch.uint8)

    n13, n2 = 2 * inter // 16, h // 16
    if form is ExpertForm.INT8:
        w13, w2 = rb(experts, n13, h // 4, 16, 4), rb(experts, n2, inter // 4, 16, 4)
        s = lambda n: torch.full((experts, n), 2e-4)  # noqa: E731
        return HostExpertLayer(form, h, inter, w13, w2, s(2 * inter), s(h))
    if form is ExpertForm.INT4:
        w13, w2 = rb(experts, n13, h // 8, 16, 4), rb(experts, n2, inter // 8, 16, 4)
        s = lambda n, k: torch.full((experts, n, k // 128, 16), 1e-3, dtype=torch.bfloat16)  # noqa: E731
        return HostExpertLayer(
            form, h, inter, w13, w2, s(n13, h), s(n2, inter), s(n13, h), s(n2, inter)
        )
    if form is ExpertForm.MXFP8:
        w13, w2 = rb(experts, n13, h // 2, 16, 2) & 0x77, rb(experts, n2, inter // 2, 16, 2) & 0x77
        e = lambda *sh: torch.full(sh, 118, dtype=torch.uint8)  # noqa: E731
        return HostExpertLayer(
            form, h, inter, w13, w2, e(experts, n13, h // 32, 16), e(experts, n2, inter // 32, 16)
        )
    w13 = (torch.randn(experts, n13, h // 2, 16, 2, generator=g) * 0.02).bfloat16()
    w2 = (torch.randn(experts, n2, inter // 2, 16, 2, generator=g) * 0.02).bfloat16()
    return HostExpertLayer(form, h, inter, w13, w2)


def environment(threads: int) -> dict:
    env = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "cpu": platform.processor() or platform.machine(),
        "threads": threads,
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "load_average": os.getloadavg(),
        "scheduler": scheduler(),
    }
    try:
        env["cpu_model"] = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return env


def paired_samples(
    step, bw_buf: torch.Tensor, pairs: int, steps: int, bw: float | None = None
) -> list[dict]:
    """`pairs` x (bandwidth check, then `steps` calls of step() -> bytes touched); `bw`: a
    check the caller just took (then no new one)."""
    out = []
    given = bw
    for _ in range(pairs):
        bw = given if given is not None else host_read_bw(bw_buf)
        t0, cpu0, nbytes = time.perf_counter(), time.process_time(), 0
        for _ in range(steps):
            nbytes += step()
        dt = time.perf_counter() - t0
        out.append(
            {
                "bw_GBps": bw / 1e9,
                "ms": dt / steps * 1e3,
                "GBps": nbytes / dt / 1e9,
                "share": nbytes / dt / bw,
                "cpu_s_per_wall_s": (time.process_time() - cpu0) / dt,
            }
        )
    return out


def summarize(samples: list[dict]) -> dict:
    best = max(samples, key=lambda s: s["share"])
    return {
        "best_pair": best,
        "median_share": statistics.median(s["share"] for s in samples),
        "median_ms": statistics.median(s["ms"] for s in samples),
        "median_bw_GBps": statistics.median(s["bw_GBps"] for s in samples),
        "pairs": samples,
    }


def expert_step(cpu: CpuExperts, layer: HostExpertLayer, batch: int, top_k: int, g) -> callable:
    h, experts = layer.hidden, layer.num_experts

    def step() -> int:
        x = torch.randn(batch, h, generator=g)
        ids = torch.stack([torch.randperm(experts, generator=g)[:top_k] for _ in range(batch)])
        cpu.forward(0, x, ids, torch.full((batch, top_k), 1.0 / top_k))
        return len(torch.unique(ids)) * layer.expert_bytes()

    return step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=6144)
    ap.add_argument("--inter", type=int, default=3072)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0, help="0: physical cores")
    ap.add_argument("--forms", default="int8,int4,mxfp8,bf16")
    ap.add_argument("--torch", action="store_true", help="torch ops, not the compiled kernel")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    threads = a.threads or physical_cores()
    torch.set_num_threads(threads)
    rows = [{"bench": "environment", **environment(threads)}]
    bw_buf = torch.ones((1 << 30) // 8, dtype=torch.int64)
    for form_name in a.forms.split(","):
        form = ExpertForm(form_name)
        layer = random_layer(form, a.experts, a.hidden, a.inter, 0)
        cpu = CpuExperts({0: layer}, use_kernel=not a.torch)
        for batch in (1, 8):
            g = torch.Generator().manual_seed(batch)
            step = expert_step(cpu, layer, batch, a.top_k, g)
            step()  # warm-up (and the kernel build, once)
            row = {
                "bench": "offload_cpu_experts",
                "form": form_name,
                "path": "kernel" if cpu.uses_kernel else "torch",
                "batch": batch,
                "top_k": a.top_k,
                "hidden": a.hidden,
                "inter": a.inter,
                "experts_resident": a.experts,
                "expert_MB": layer.expert_bytes() / 1e6,
                **summarize(paired_samples(step, bw_buf, a.pairs, a.steps)),
            }
            rows.append(row)
            b = row["best_pair"]
            print(
                f"{form_name:6s} b{batch}: best {b['ms']:.1f} ms {b['GBps']:.1f} GB/s "
                f"= {b['share']:.0%} of {b['bw_GBps']:.1f} GB/s; median share "
                f"{row['median_share']:.0%}",
                flush=True,
            )
        del layer, cpu
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
