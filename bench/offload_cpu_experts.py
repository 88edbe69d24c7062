"""offload_decode, CPU half: M3's routed experts computed on the host at full width.

Per MoE layer at decode, the CPU reads the 4 chosen experts (3 x 6144 x 3072 weights each) from
host memory. This script measures, in one run: the host read bandwidth (multi-threaded sum over
a buffer far larger than the caches), then `CpuExperts.forward` at M3's expert shape for
batch 1 and 8, int8 and bf16, rotating over enough layers that no expert is served from cache;
each as ms per layer and as a share of the measured bandwidth (bytes of the experts touched
over the time). Also the bound for 57 layers.

    python bench/offload_cpu_experts.py [--layers 6] [--experts 16] [--out FILE]

Host memory: layers x experts x 56.6 MB (int8) or 113 MB (bf16), e.g. 6 x 16: 5.4 / 10.9 GB.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch
from m3agent.engine.offload.cpu_experts import (  # noqa: E402
    CpuExperts,
    HostExpertLayer,
    physical_cores,
)
from m3agent.engine.offload.plan import ExpertForm  # noqa: E402


def host_read_bw(nbytes: int = 4 << 30, repeats: int = 5) -> float:
    x = torch.ones(nbytes // 8, dtype=torch.int64)
    x.sum()
    best = min(_timed(x.sum) for _ in range(repeats))
    return nbytes / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def random_layer(form: ExpertForm, experts: int, h: int, inter: int, seed: int):
    """Random weights written straight in the host form (quantising 113 MB per expert through
    fp32 would take longer than the benchmark)."""
    g = torch.Generator().manual_seed(seed)
    if form.value == "bf16":
        w13 = (torch.randn(experts, 2 * inter, h, generator=g) * 0.02).to(torch.bfloat16)
        w2 = (torch.randn(experts, h, inter, generator=g) * 0.02).to(torch.bfloat16)
        return HostExpertLayer(form, w13, w2)
    w13 = torch.randint(-127, 128, (experts, 2 * inter, h), generator=g, dtype=torch.int8)
    w2 = torch.randint(-127, 128, (experts, h, inter), generator=g, dtype=torch.int8)
    s13 = torch.full((experts, 2 * inter), 2e-4, dtype=torch.bfloat16)
    s2 = torch.full((experts, h), 2e-4, dtype=torch.bfloat16)
    return HostExpertLayer(form, w13, w2, s13, s2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=6144)
    ap.add_argument("--inter", type=int, default=3072)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--threads", type=int, default=0, help="0: physical cores")
    ap.add_argument("--forms", default="int8,bf16")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    threads = a.threads or physical_cores()
    torch.set_num_threads(threads)
    env = {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "cpu": platform.processor() or platform.machine(),
        "threads": threads,
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }
    try:
        env["cpu_model"] = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    rows = [{"bench": "host_read_bw", **env, "GBps": host_read_bw() / 1e9}]
    print(json.dumps(rows[-1]), flush=True)
    bw = rows[0]["GBps"] * 1e9
    for form_name in a.forms.split(","):
        form = ExpertForm(form_name)
        layers = {i: random_layer(form, a.experts, a.hidden, a.inter, i) for i in range(a.layers)}
        cpu = CpuExperts(layers)
        one = layers[0].expert_bytes()
        for batch in (1, 8):
            g = torch.Generator().manual_seed(batch)
            times, touched = [], []
            for step in range(a.steps + 2):
                x = torch.randn(batch, a.hidden, generator=g).to(torch.bfloat16)
                for layer in range(a.layers):
                    ids = torch.stack(
                        [torch.randperm(a.experts, generator=g)[: a.top_k] for _ in range(batch)]
                    )
                    w = torch.full((batch, a.top_k), 1.0 / a.top_k)
                    dt = _timed(lambda: cpu.forward(layer, x, ids, w))  # noqa: B023
                    if step >= 2:  # warm-up steps apart
                        times.append(dt)
                        touched.append(len(torch.unique(ids)) * one)
            med = statistics.median(times)
            gbps = statistics.median(t / s for t, s in zip(touched, times, strict=True)) / 1e9
            per_layer_bytes = statistics.median(touched)
            row = {
                "bench": "offload_cpu_experts",
                "form": form_name,
                "batch": batch,
                "top_k": a.top_k,
                "hidden": a.hidden,
                "inter": a.inter,
                "experts_allocated_per_layer": a.experts,
                "layers_rotated": a.layers,
                "ms_per_layer_median": med * 1e3,
                "ms_per_layer_p10_p90": [
                    statistics.quantiles(times, n=10)[0] * 1e3,
                    statistics.quantiles(times, n=10)[-1] * 1e3,
                ],
                "weights_GBps": gbps,
                "share_of_host_read_bw": gbps * 1e9 / bw,
                "ms_per_token_57_layers": med * 57e3,
                "bound_ms_per_token_57_layers": 57 * per_layer_bytes / bw * 1e3,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
