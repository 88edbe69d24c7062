"""Issue 26: the offloaded M3 end to end on one GPU, routed experts in the host's memory.

Full-width M3 layers (hidden 6144, 128 routed experts of width 3072 per MoE layer, top-4, one
shared expert, 64/4 heads, MSA) with as many MoE layers as the host RAM holds in each form,
3 dense layers, the real vocabulary; every non-expert weight random bf16 on the GPU, the
routed experts built in host memory in the form (a few random experts converted once, then
copied into every slot: distinct memory, the same bytes to read). Through the real LLMEngine
with the offload runtime attached (placement.attach): decode at batch 1 and 4, 32K and 128K
context (random K/V written into the pages, prefill skipped), with and without the hot-expert
cache (sized as the 57-layer plan sizes it on this GPU; hit rate from this run's routing);
prefill of a 4K and a 32K chunk (experts streamed over PCIe); peak GPU and host memory against
the plan; the planner's bounds; an extrapolation to 57 MoE layers. One JSON file.

  python bench/offload_e2e.py [--out DIR] [--forms int8,bf16] [--max-layers N] [--smoke]

--smoke: tiny sizes on the CPU (the "GPU" is the CPU device), for CI.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from offload_cpu_experts import scheduler  # noqa: E402
from offload_e2e_model import (  # noqa: E402
    engine_for,
    gpu_model,
    gpu_used,
    host_layers,
    machine,
    pcie_bw,
    proc_kib,
    say,
    seed_layer,
    snapshot,
    text_config,
)

GIB = 1 << 30
FULL = dict(
    hidden=6144, heads=64, kv_heads=4, topk_blocks=16, vocab=200064, dense_layers=3,
    dense_intermediate=12288, experts=128, top_k=4, inter=3072,
    batches=(1, 4), contexts=(32768, 131072), chunks=(4096, 32768),
    warm=3, timed=8, seeds=4, stream_tokens=1024, stream_experts=32,
)  # fmt: skip
SMOKE = dict(
    hidden=256, heads=2, kv_heads=1, topk_blocks=4, vocab=512, dense_layers=1,
    dense_intermediate=256, experts=8, top_k=2, inter=128,
    batches=(1, 2), contexts=(512, 1024), chunks=(128, 256),
    warm=1, timed=3, seeds=2, stream_tokens=64, stream_experts=3,
)  # fmt: skip
# --cpu-full-width: the smoke run at M3's real expert shape (16 experts, top-4), on the CPU
CPU_FULL = {**SMOKE, "hidden": 6144, "inter": 3072, "experts": 16, "top_k": 4}
FULL_MOE_LAYERS = 57


def expected_unique(e: int, k: int, batch: int) -> float:
    """Experts a batch touches per layer under uniform routing."""
    return e * (1 - (1 - k / e) ** batch)


def decode_case(model, s, device, batch, ctx, hot_on, m, n_layers, expert_bytes, plan) -> dict:
    from m3agent.engine.native.core.sampling_params import native_params
    from stack_model import fill_caches, skip_prefill

    rt = model.offload
    for mod in rt.modules.values():
        mod.hot = rt.hot if hot_on else None
    steps = s["warm"] + s["timed"]
    engine = engine_for(model, device, batch, ctx + steps + 256, 16384)
    fill_caches(engine.runner.caches)
    skip_prefill(engine)
    gen = torch.Generator().manual_seed(batch * 7 + ctx)
    for r in range(batch):  # the first add_request refreshes the hot cache (idle engine)
        prompt = torch.randint(2, s["vocab"], (ctx,), generator=gen).tolist()
        engine.add_request(f"r{r}", prompt, native_params(max_tokens=10**6, ignore_eos=True))
    while any(
        q.num_computed_tokens < q.num_prompt_tokens for q in engine.scheduler.requests.values()
    ):
        engine.step()
    for _ in range(s["warm"]):
        engine.step()
    before = snapshot(rt)
    walls = []
    for _ in range(s["timed"]):
        t = time.perf_counter()
        outs = engine.step()
        if device == "cuda":
            torch.cuda.synchronize()
        walls.append(time.perf_counter() - t)
        assert len(outs) == batch and not any(o.error for o in outs), [o.error for o in outs]
    after = snapshot(rt)
    d = {k: after[k] - before[k] for k in after}
    ms = 1e3 * statistics.median(walls)
    hot_n = rt.hot.per_layer if (hot_on and rt.hot) else 0
    e, k = s["experts"], s["top_k"]
    cold_share = 1 - hot_n / e
    host_bound_ms = (
        1e3 * n_layers * expected_unique(e, k, batch) * cold_share * expert_bytes / m.host_read_bw
    )
    gpu_bound_ms = 1e3 * plan.decode_gpu_s if plan is not None else 0.0
    bound_ms = max(host_bound_ms, gpu_bound_ms)
    per_layer_ms = 1e3 * d["moe_s"] / s["timed"] / n_layers
    rest_ms = max(0.0, ms - n_layers * per_layer_ms)
    layers_all = s["dense_layers"] + n_layers
    ms_57 = (
        rest_ms * (s["dense_layers"] + FULL_MOE_LAYERS) / layers_all
        + FULL_MOE_LAYERS * per_layer_ms
    )
    row = dict(
        name="offload_decode", batch=batch, context=ctx, hot_cache=hot_on,
        hot_experts_per_layer=hot_n, moe_layers=n_layers, cuda_graphs=False,
        ms_per_step=ms, ms_per_token=ms / batch,
        p10_ms=1e3 * sorted(walls)[len(walls) // 10], p90_ms=1e3 * sorted(walls)[(9 * len(walls)) // 10],
        host_bound_ms_per_step=host_bound_ms, gpu_bound_ms_per_step=gpu_bound_ms,
        bound_share=bound_ms / ms,
        cpu_step_ms_per_layer=1e3 * d["cpu_s"] / s["timed"] / n_layers,
        cpu_step_gbs=d["cpu_bytes"] / d["cpu_s"] / 1e9 if d["cpu_s"] else None,
        cpu_step_bw_share=(d["cpu_bytes"] / d["cpu_s"] / m.host_read_bw) if d["cpu_s"] else None,
        moe_ms_per_layer=per_layer_ms, rest_ms_per_step=rest_ms,
        hot_hit_rate=(d["hits"] / d["lookups"]) if d["lookups"] else None,
        extrapolated_57_layers_ms_per_step=ms_57,
    )  # fmt: skip
    del engine
    gc.collect()
    return row


def prefill_case(model, s, device, chunk, m, n_layers, layer_bytes) -> dict:
    from m3agent.engine.native.core.sampling_params import native_params

    rt = model.offload
    engine = engine_for(model, device, 1, chunk + 256, chunk)
    prompt = torch.randint(2, s["vocab"], (chunk,), generator=torch.Generator().manual_seed(chunk))
    engine.add_request("p", prompt.tolist(), native_params(max_tokens=1, ignore_eos=True))
    streamed0 = rt.stats().bytes_streamed
    t = time.perf_counter()
    outs = engine.step()  # the whole chunk: every MoE layer streams its experts
    if device == "cuda":
        torch.cuda.synchronize()
    wall = time.perf_counter() - t
    assert outs and not outs[0].error, outs
    bound_s = n_layers * layer_bytes / m.pcie_bw
    row = dict(
        name="offload_prefill", chunk=chunk, moe_layers=n_layers, seconds=wall,
        tokens_per_s=chunk / wall, pcie_bound_tokens_per_s=chunk / bound_s,
        pcie_share=bound_s / wall, bytes_streamed=rt.stats().bytes_streamed - streamed0,
        extrapolated_57_layers_tokens_per_s=chunk / (wall * FULL_MOE_LAYERS / n_layers),
    )  # fmt: skip
    del engine
    gc.collect()
    return row


def plan_for(c, form, m, n_layers, s, hot: bool):
    from m3agent.engine.offload.inventory import StorageFormat, from_config
    from m3agent.engine.offload.plan import PlanRequest, make_plan

    inv = from_config(c, StorageFormat.BF16)  # what the GPU holds here: bf16 weights
    req = PlanRequest(
        context_len=max(s["contexts"]), max_seqs=max(s["batches"]), kv_cache_dtype="fp8",
        expert_form=form, chunk_tokens=max(s["chunks"]), stream_experts=s["stream_experts"],
        hot_experts=hot, moe_layers=n_layers,
    )  # fmt: skip
    return make_plan(c, inv, m, req)


def run_form(form, s, device, m, max_layers, rows) -> None:
    from m3agent.engine.m3.config import M3TextConfig
    from m3agent.engine.offload.config import OffloadConfig
    from m3agent.engine.offload.inventory import StorageFormat, from_config
    from m3agent.engine.offload.placement import attach
    from m3agent.engine.offload.plan import PlanRequest, make_plan

    cuda = device == "cuda"
    c1 = text_config(s, 1)
    seed = seed_layer(c1, form, s["seeds"])
    expert_bytes = seed.expert_bytes()
    layer_bytes = expert_bytes * s["experts"]
    avail = proc_meminfo_available()
    reserve = 12 * GIB if cuda else 0
    n = max(1, min(max_layers, (avail - reserve) // layer_bytes)) if cuda else min(max_layers, 2)
    say(
        f"{form}: {layer_bytes / GIB:.2f} GiB per MoE layer, {avail / GIB:.0f} GiB available: {n} MoE layers"
    )
    c = text_config(s, n)
    # hot slots as the full 57-layer model would get them on this GPU (the smoke run: 2 of 8)
    if cuda:
        full = M3TextConfig()
        plan57 = make_plan(
            full, from_config(full, StorageFormat.FP8), m, PlanRequest(expert_form=form)
        )
        hot = plan57.hot_per_layer
    else:
        plan57 = make_plan(
            c,
            from_config(c, StorageFormat.BF16),
            m,
            PlanRequest(context_len=1024, expert_form=form),
        )
        hot = 2
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    model = gpu_model(c, device)
    rss_before = proc_kib("VmRSS") * 1024
    # built unpinned: attach() page-locks them in place (torch's pinned allocator rounds each
    # 6.75 GiB layer up to 8 GiB, and ran out of pinned memory at 10 layers on the H200 host)
    layers = host_layers(
        c, seed, [i for i in range(c.num_hidden_layers) if c.is_moe_layer(i)], False
    )
    cfg = OffloadConfig(
        form=form, hot_experts_per_layer=hot, prefill_stream_tokens=s["stream_tokens"],
        stream_experts=s["stream_experts"],
    )  # fmt: skip
    attach(model, layers, cfg, device)
    experts_rss = proc_kib("VmRSS") * 1024 - rss_before  # the host experts, pinned, as resident
    del seed  # after the reading: it was resident before and after
    build_s = time.perf_counter() - t0
    say(f"{form}: model built in {build_s:.0f} s (hot cache {hot} experts per layer)")
    plan = plan_for(c, form, m, n, s, hot=False)
    gpu_peak, rss_peak = gpu_used(cuda), proc_kib("VmRSS") * 1024
    form_rows = []
    for batch in s["batches"]:
        for ctx in s["contexts"]:
            for hot_on in (False, True):
                r = decode_case(model, s, device, batch, ctx, hot_on, m, n, expert_bytes, plan)
                r.update(form=str(form))
                form_rows.append(r)
                print(json.dumps(r), flush=True)
                say(
                    f"{form} decode b{batch} {ctx} hot={hot_on}: {r['ms_per_step']:.1f} ms/step, bound share {r['bound_share']:.0%}"
                )
                gpu_peak, rss_peak = (
                    max(gpu_peak, gpu_used(cuda)),
                    max(rss_peak, proc_kib("VmRSS") * 1024),
                )
    for chunk in s["chunks"]:
        r = prefill_case(model, s, device, chunk, m, n, layer_bytes)
        r.update(form=str(form))
        form_rows.append(r)
        print(json.dumps(r), flush=True)
        say(
            f"{form} prefill {chunk}: {r['tokens_per_s']:.0f} tokens/s, PCIe share {r['pcie_share']:.0%}"
        )
        gpu_peak, rss_peak = max(gpu_peak, gpu_used(cuda)), max(rss_peak, proc_kib("VmRSS") * 1024)
    hot_bytes = hot * n * expert_bytes
    planned_gpu = plan.total("gpu") + hot_bytes
    planned_host = plan.total("host")
    measured_host = rss_peak  # the whole process, as the plan's rows (with its 4 GiB overhead)
    mem = dict(
        name="offload_memory", form=str(form), moe_layers=n, build_s=build_s,
        gpu_planned=planned_gpu, gpu_measured=gpu_peak,  # the device's used memory: context included
        gpu_allocator_peak=torch.cuda.max_memory_reserved() if cuda else None,
        host_planned=planned_host, host_measured=measured_host,
        host_experts_bytes=model.offload.host_bytes, vm_hwm=proc_kib("VmHWM") * 1024,
        host_experts_rss=experts_rss,
        host_experts_ratio=experts_rss / next(
            r.nbytes for r in plan.rows if r.label.startswith("routed experts")
        ),
        plan_rows={r.label: r.nbytes for r in plan.rows},
        planner_57_layers=dict(
            decode_host_ms=1e3 * plan57.decode_host_s, decode_gpu_ms=1e3 * plan57.decode_gpu_s,
            tokens_per_s=plan57.tokens_per_s, hot_per_layer=plan57.hot_per_layer,
            fits=plan57.fits, host_total=plan57.total("host"),
        ),
    )  # fmt: skip
    mem["gpu_ratio"] = mem["gpu_measured"] / planned_gpu if cuda else None
    mem["host_ratio"] = measured_host / planned_host
    print(json.dumps(mem), flush=True)
    say(
        f"{form} memory: GPU {mem['gpu_measured'] / GIB:.1f} of {planned_gpu / GIB:.1f} GiB planned, host {measured_host / GIB:.1f} of {planned_host / GIB:.1f} GiB"
    )
    rows.extend(form_rows + [mem])
    model.offload.close()
    del model, layers
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def proc_meminfo_available() -> int:
    from m3agent.engine.offload.hardware import meminfo_available

    return meminfo_available()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="directory for the JSON file")
    ap.add_argument("--forms", default="int8,bf16", help="host expert forms, comma-separated")
    ap.add_argument("--max-layers", type=int, default=57, help="most MoE layers to build")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (CI)")
    ap.add_argument(
        "--cpu-full-width", action="store_true",
        help="the smoke run's cases at hidden 6144 x expert 3072, 16 experts top-4, on the CPU",
    )  # fmt: skip
    a = ap.parse_args()
    a.smoke = a.smoke or a.cpu_full_width
    from m3agent.engine.offload.hardware import measure_host_read_bw
    from m3agent.engine.offload.plan import ExpertForm

    try:
        forms = [ExpertForm(f) for f in a.forms.split(",")]
    except ValueError as e:
        sys.exit(f"error: {e}")
    cuda = torch.cuda.is_available() and not a.smoke
    device = "cuda" if cuda else "cpu"
    s = CPU_FULL if a.cpu_full_width else SMOKE if a.smoke else FULL
    if not cuda and not a.smoke:
        sys.exit("error: no CUDA GPU here (use --smoke for the CPU run)")
    t0 = time.perf_counter()
    say(f"measuring host read and PCIe bandwidth ({device})")
    host_bw = measure_host_read_bw(4 * GIB if cuda else 256 << 20)
    pcie = pcie_bw(cuda, 2 * GIB) or 55e9
    if cuda:
        torch.cuda.empty_cache()  # the PCIe buffers: not part of any plan row
    m = machine(cuda, host_bw, pcie)
    env = dict(
        date=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), device=device,
        gpu=torch.cuda.get_device_name() if cuda else None, torch=torch.__version__,
        cpu_threads=torch.get_num_threads(), host_read_gbs=host_bw / 1e9,
        pcie_gbs=pcie / 1e9 if cuda else None, smoke=a.smoke, shape=s,
        scheduler=scheduler(), load_average=os.getloadavg(),
    )  # fmt: skip
    print(json.dumps(env), flush=True)
    rows: list[dict] = []
    for form in forms:
        run_form(form, s, device, m, a.max_layers, rows)
    env["total_s"] = time.perf_counter() - t0
    out_dir = a.out or Path(os.environ.get("OUT") or Path(__file__).resolve().parent / "results")
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = (
        "cpu-full-width" if a.cpu_full_width
        else "smoke" if a.smoke else (env["gpu"] or "gpu").split()[-1].lower()
    )  # fmt: skip
    path = out_dir / f"offload_e2e_{tag}_{env['date'][:10]}.json"
    path.write_text(json.dumps({"env": env, "rows": rows}, indent=1))
    say(f"done in {env['total_s']:.0f} s: {path}")


if __name__ == "__main__":
    main()
