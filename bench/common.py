"""Shared benchmark machinery: environment record, ceilings, CUDA-graph timing, JSON rows.

Run any bench script from the repository root (`python bench/<name>.py`); each prints one JSON
object per measurement. Timing follows PROTOCOL.md: decode as CUDA-graph replays over
per-layer buffers that rotate through more than 2x L2, median and spread reported, compile /
autotune time kept apart.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import triton
import triton.language as tl

L2_BYTES = 60 * 2**20


def env_record() -> dict:
    smi = subprocess.run(
        [
            "nvidia-smi",
            "--query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,"
            "clocks.max.mem,power.draw,power.limit,temperature.gpu",
            "--format=csv,noheader",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return {
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(),
        "sm_count": torch.cuda.get_device_properties(0).multi_processor_count,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "nvidia_smi": smi.stdout.strip() or smi.stderr.strip(),
    }


def emit(row: dict, sink: list | None = None) -> dict:
    print(json.dumps(row), flush=True)
    if sink is not None:
        sink.append(row)
    return row


def emit_error(name: str, exc: Exception, sink: list | None = None, **variant) -> dict:
    """The row of a sweep variant that failed (e.g. out of shared memory): the row's name, the
    variant's fields and the error's first line."""
    return emit({"name": name, **variant, "error": str(exc).splitlines()[0][:160]}, sink)


def vs_dense(r: dict, dense_key: str, dense: dict, best_us: float) -> dict:
    """An MSA timing r (time_graph / time_eager) beside the dense baselines of the same shape:
    median, p10, p90, the dense figures under dense_key and the speed-up over the best of them."""
    return {
        "msa_us": r["median_us"],
        "p10_us": r["p10_us"],
        "p90_us": r["p90_us"],
        dense_key: dense,
        "speedup_vs_best_dense": best_us / r["median_us"],
    }


def _stats(times_ms: list[float]) -> dict:
    s = sorted(times_ms)
    q = lambda f: s[min(len(s) - 1, int(f * len(s)))]  # noqa: E731
    return {"median_us": 1e3 * statistics.median(s), "p10_us": 1e3 * q(0.1), "p90_us": 1e3 * q(0.9)}


def time_graph(step: Callable[[int], object], n_layers: int, replays: int = 20) -> dict:
    """Capture step(0..n_layers-1) back to back in one CUDA graph (each layer its own buffers),
    time the replays; the per-layer figure is the replay time over n_layers."""
    t0 = time.perf_counter()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(n_layers):  # warm-up: compiles and autotunes outside the graph
            step(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n_layers):
            step(i)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / n_layers)
    del g
    return {**_stats(times), "compile_s": compile_s}


def time_eager(fn: Callable[[int], object], n_layers: int, reps: int = 5) -> dict:
    """For steps that sync on the host (prefill work lists): events around each call."""
    t0 = time.perf_counter()
    fn(0)
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0
    times = []
    for r in range(reps):
        i = r % n_layers
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return {**_stats(times), "compile_s": compile_s}


@triton.jit
def _read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    base = pid.to(tl.int64) * BLOCK * ITERS
    for i in range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def ceilings(sink: list | None = None) -> dict:
    """Streaming read bandwidth (Triton read-and-reduce of 4 GiB), device copy (r+w), and
    the bf16 8192^3 GEMM rate on random data."""
    n = 2 * 2**30  # bf16 elements: 4 GiB
    x = torch.randn(n // 2, device="cuda", dtype=torch.bfloat16).repeat(2)
    block, iters = 4096, 8
    grid = (triton.cdiv(n, block * iters),)
    out = torch.empty(grid[0], device="cuda", dtype=torch.float32)
    t = time_graph(lambda i: _read_kernel[grid](x, out, n, BLOCK=block, ITERS=iters), 1, 10)
    read_tbs = 2 * n / (t["median_us"] * 1e-6) / 1e12
    y = torch.empty_like(x)
    tc = time_graph(lambda i: y.copy_(x), 1, 10)
    copy_tbs = 2 * 2 * n / (tc["median_us"] * 1e-6) / 1e12
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    tg = time_graph(lambda i: a @ b, 1, 10)
    gemm = 2 * 8192**3 / (tg["median_us"] * 1e-6) / 1e12
    row = {
        "name": "ceilings",
        "read_TBps": read_tbs,
        "copy_rw_TBps": copy_tbs,
        "bf16_gemm_TFLOPs": gemm,
        "protocol_read_TBps": 4.47,
        "protocol_gemm_TFLOPs": 784,
        "read_drift": read_tbs / 4.47 - 1,
        "gemm_drift": gemm / 784 - 1,
    }
    return emit(row, sink)


def sdpa_backends():
    from torch.nn.attention import SDPBackend

    return {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash2": SDPBackend.FLASH_ATTENTION}


def main_guard(run: Callable[[list, dict], None]) -> None:
    if not torch.cuda.is_available():
        sys.exit("bench needs a CUDA GPU")
    rows: list = []
    ceil = ceilings(rows)
    run(rows, ceil)


def paged_md(
    seq_lens: list[int],
    query_lens: list[int],
    num_decodes: int = 0,
    decode_query_len: int = 1,
    pool_pages: int | None = None,
    seed: int = 0,
):
    """Metadata with shuffled pages. pool_pages: draw every block-table entry at random from a
    pool of that many pages (aliasing allowed), so huge logical contexts fit in memory for
    kernels that only read the selected pages."""
    from m3agent.engine.native.kernels.testing import make_metadata

    gen = torch.Generator().manual_seed(seed)
    md = make_metadata(
        seq_lens,
        query_lens,
        "cuda",
        gen,
        num_decodes=num_decodes,
        decode_query_len=decode_query_len,
    )
    if pool_pages is not None:
        import dataclasses

        bt = torch.randint(0, pool_pages, md.block_tables.shape, generator=gen, dtype=torch.int32)
        md = dataclasses.replace(md, block_tables=bt.cuda())
    return md


def num_pages(md) -> int:
    return int(md.block_tables.max()) + 1


def rand_cache(shape, dtype) -> torch.Tensor:
    return torch.randn(shape, device="cuda", dtype=torch.bfloat16).to(dtype)


def random_selection(md, hkv: int, topk: int, seed: int = 0) -> torch.Tensor:
    """[T, Hkv, topk] distinct visible blocks, the own block forced, -1 padded: random scores
    through the same top-k rule (block ids anywhere in the context)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    pos = md.positions.long()
    nb = md.block_tables.shape[1]
    nvis = pos // 128 + 1
    s = torch.rand((pos.shape[0], hkv, nb), device="cuda", generator=g)
    b = torch.arange(nb, device="cuda")
    s = torch.where(b[None, None, :] < nvis[:, None, None], s, float("-inf"))
    s = torch.where(b[None, None, :] == (nvis - 1)[:, None, None], 2.0, s)
    vals, idx = torch.topk(s, min(topk, nb), dim=-1)
    return torch.where(vals == float("-inf"), -1, idx).to(torch.int32)
