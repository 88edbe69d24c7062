"""offload_vs_llamacpp: our CPU experts against llama.cpp's CPU MoE, one process, one machine.

Same shape on both sides: hidden 6144, expert width 3072, top-4 of 16 experts in each of the same
number of layers (3: more bytes than the last-level cache on either side), batch
1 and 8, threads = physical cores. Ours: `CpuExperts.forward` at int8 / int4 / bf16 / mxfp8
(bench/offload_cpu_experts.py's random layers). llama.cpp: through llama-cpp-python when it is
installed (never a dependency of the project; skipped with a note otherwise). It exposes no
per-layer MoE op, so this writes a GGUF of a few full-width MoE layers (llama architecture
with 16 experts, one 128-wide attention head and a 259-token vocabulary so nothing else costs
much), quantises it with llama.cpp's own quantiser (`pure`, every expert tensor Q8_0 or Q4_K),
and times whole tokens twice, with `expert_used_count` 4 and 1 (a GGUF key override): the
difference is the cost of the extra experts alone, which removes attention, router, norms and
the head. Each round is a bandwidth check, then ours, then llama.cpp's two token times, so both
sides are measured within seconds of each other; `--realtime` runs the whole process under
SCHED_FIFO, which keeps a shared machine's other processes off the two cores meanwhile. Per
layer, the expert time at top-4 is

    (t(k=4) - t(k=1)) / (u4 - u1) * u4 / layers

with u_k the expected number of distinct experts a step touches (k at batch 1; 16(1 - (1 -
k/16)^8) at batch 8, routing being uniform on random weights). Every sample on either side is
taken right after a host bandwidth check; rows give ms per layer, GB/s of expert weights, the
share of the bandwidth measured beside it, best pair and median; the ratios ours/llama.cpp
pair int8 with Q8_0 and int4 with Q4_K (comparable bytes per expert).

    python bench/offload_vs_llamacpp.py [--realtime] [--layers 2] [--pairs 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from m3agent.engine.offload.cpu_experts import CpuExperts, physical_cores  # noqa: E402
from m3agent.engine.offload.plan import ExpertForm  # noqa: E402
from offload_cpu_experts import (  # noqa: E402
    environment,
    host_read_bw,
    paired_samples,
    random_layer,
    summarize,
)
from scheduling import realtime  # noqa: E402

H, INTER, EXPERTS, TOP_K, VOCAB = 6144, 3072, 16, 4, 259
# One head of 144: a width llama.cpp's AMX matmul refuses (output rows not a multiple of 32),
# so the attention projections stay on its plain CPU path. Its AMX matmul segfaults at batch
# > 1 on the hosts measured here (2-core VM and the H200's host) and holds only those
# projections anyway: the routed experts go to its CPU_REPACK (Q4_K) or CPU buffer (Q8_0)
# either way. The attention's cost is the same at k=4 and k=1, so it cancels.
HEADS, HEAD_DIM = 1, 144
LLAMA_TYPES = {"Q8_0": 7, "Q4_K": 14}  # llama_ftype: MOSTLY_Q8_0, MOSTLY_Q4_K_S (pure: all Q4_K)
BYTES_PER_WEIGHT = {"Q8_0": 34 / 32, "Q4_K": 144 / 256}
PAIRS_WITH = {"int8": "Q8_0", "int4": "Q4_K"}


def distinct(k: int, batch: int) -> float:
    return EXPERTS * (1 - (1 - k / EXPERTS) ** batch)


def write_gguf(path: Path, layers: int) -> None:
    """An F16 llama-architecture MoE GGUF at M3's expert shape (values random: only speed is
    measured). One random buffer backs every expert tensor, so writing costs 600 MB of RAM."""
    import gguf

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(4096)
    w.add_embedding_length(H)
    w.add_block_count(layers)
    w.add_feed_forward_length(INTER)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(TOP_K)
    w.add_file_type(1)  # F16
    w.add_tokenizer_model("llama")  # SPM: 3 specials + 256 byte tokens, no merges needed
    w.add_token_list(["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)])
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types([2, 3, 3] + [6] * 256)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    f16 = lambda *s: (rng.standard_normal(s, dtype=np.float32) * 0.02).astype(np.float16)  # noqa: E731
    exps = f16(EXPERTS, INTER, H)
    w.add_tensor("token_embd.weight", f16(VOCAB, H))
    w.add_tensor("output_norm.weight", np.ones(H, dtype=np.float32))
    for i in range(layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", np.ones(H, dtype=np.float32))
        for n in ("attn_q", "attn_k", "attn_v"):
            w.add_tensor(b + n + ".weight", f16(HEADS * HEAD_DIM, H))
        w.add_tensor(b + "attn_output.weight", f16(H, HEADS * HEAD_DIM))
        w.add_tensor(b + "ffn_norm.weight", np.ones(H, dtype=np.float32))
        w.add_tensor(
            b + "ffn_gate_inp.weight", (rng.standard_normal((EXPERTS, H)) * 0.02).astype(np.float32)
        )
        w.add_tensor(b + "ffn_gate_exps.weight", exps)
        w.add_tensor(b + "ffn_up_exps.weight", exps)
        w.add_tensor(b + "ffn_down_exps.weight", exps.reshape(EXPERTS, H, INTER))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def quantize(llama_cpp, src: Path, dst: Path, qtype: str) -> None:
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = LLAMA_TYPES[qtype]
    p.pure = True
    p.nthread = physical_cores()
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), p)
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize {qtype} returned {rc}")


def token_step(cpu: CpuExperts, held: dict, batch: int, g) -> callable:
    """One decode step's routed experts over every held layer (random top-4 per token)."""
    x, wts = torch.randn(batch, H, generator=g), torch.full((batch, TOP_K), 1.0 / TOP_K)

    def step() -> int:
        nbytes = 0
        for i, layer in held.items():
            ids = torch.stack([torch.randperm(EXPERTS, generator=g)[:TOP_K] for _ in range(batch)])
            cpu.forward(i, x, ids, wts)
            nbytes += len(torch.unique(ids)) * layer.expert_bytes()
        return nbytes

    return step


def load_llama(gguf: Path, threads: int) -> dict:
    """Two instances of one GGUF: top-4 (the real routing) and top-1 (a GGUF key override)."""
    from llama_cpp import Llama

    return {
        k: Llama(
            str(gguf),
            n_ctx=2048,
            n_batch=8,
            n_threads=threads,
            n_threads_batch=threads,
            kv_overrides={"llama.expert_used_count": k},
            verbose=False,
        )  # fmt: skip
        for k in (TOP_K, 1)
    }


def llama_token_s(model, batch: int, steps: int) -> float:
    """Seconds per eval of `batch` new tokens, mean of `steps` after one warm eval."""
    model.reset()
    model.eval([5] * batch)  # warm: weights paged in, graph built
    t0 = time.perf_counter()
    for s in range(steps):
        model.eval([7 + (s * 13 + j) % 200 for j in range(batch)])
    return (time.perf_counter() - t0) / steps


def interleaved_samples(
    ours_step, models: dict, qtype: str, layers: int, batch: int, bw_buf, pairs: int, steps: int
) -> tuple[list[dict], list[dict]]:
    """`pairs` rounds of (bandwidth check, ours, llama.cpp top-4, llama.cpp top-1): both sides
    measured within seconds of each other under the same machine state."""
    per_expert = 3 * H * INTER * BYTES_PER_WEIGHT[qtype]
    u4, u1 = distinct(TOP_K, batch), distinct(1, batch)
    ours, theirs = [], []
    for _ in range(pairs):
        bw = host_read_bw(bw_buf)
        ours += paired_samples(ours_step, bw_buf, 1, steps, bw=bw)
        t = {k: llama_token_s(m, batch, steps) for k, m in models.items()}
        ms = (t[TOP_K] - t[1]) / (u4 - u1) * u4 / layers * 1e3
        gbps = u4 * per_expert / (ms / 1e3) / 1e9
        theirs.append({"bw_GBps": bw / 1e9, "ms": ms, "GBps": gbps, "share": gbps * 1e9 / bw,
                       "token_ms_k4": t[TOP_K] * 1e3, "token_ms_k1": t[1] * 1e3,
                       "ours_ms_same_round": ours[-1]["ms"] / layers})  # fmt: skip
    return ours, theirs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=3, help="MoE layers on each side")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--forms", default="int8,int4,bf16,mxfp8")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--workdir", default="")
    ap.add_argument(
        "--realtime",
        action="store_true",
        help="run under SCHED_FIFO (root or CAP_SYS_NICE): a shared machine's other "
        "processes stop disturbing the measurement (recorded in the JSON)",
    )
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.realtime:
        realtime()
    threads = physical_cores()
    torch.set_num_threads(threads)
    env = {"bench": "environment", **environment(threads)}
    rows: list[dict] = [env]
    batches = tuple(int(b) for b in a.batches.split(","))
    bw_buf = torch.ones((1 << 30) // 8, dtype=torch.int64)
    try:
        import llama_cpp
    except ImportError:
        llama_cpp = None
        rows.append({"bench": "offload_vs_llamacpp", "side": "llama.cpp", "skipped":
                     "llama-cpp-python is not installed (bench/offload_vs_llamacpp.py docstring)"})  # fmt: skip
        print(rows[-1]["skipped"], flush=True)
    else:
        env["llama_cpp"] = llama_cpp.__version__
        env["llama_cpp_system_info"] = llama_cpp.llama_print_system_info().decode()
    with tempfile.TemporaryDirectory(dir=a.workdir or None) as tmp:
        f16 = Path(tmp) / "moe-f16.gguf"
        for name in a.forms.split(","):
            # as many layers as the GGUF has, so both sides' weights span the same bytes (this
            # class of host has a large last-level cache: 480 MB on the 2-core machine)
            held = {
                i: random_layer(ExpertForm(name), EXPERTS, H, INTER, i) for i in range(a.layers)
            }
            cpu, layer = CpuExperts(held), held[0]
            qtype = PAIRS_WITH.get(name) if llama_cpp is not None else None
            models = {}
            if qtype:
                if not f16.exists():
                    write_gguf(f16, a.layers)
                q = Path(tmp) / f"moe-{qtype}.gguf"
                quantize(llama_cpp, f16, q, qtype)
                models = load_llama(q, threads)
            for batch in batches:
                step = token_step(cpu, held, batch, torch.Generator().manual_seed(batch))
                step()
                if models:
                    ours, theirs = interleaved_samples(
                        step, models, qtype, a.layers, batch, bw_buf, a.pairs, a.steps
                    )
                else:
                    ours, theirs = paired_samples(step, bw_buf, a.pairs, a.steps), []
                ours = [{**p, "ms": p["ms"] / a.layers} for p in ours]  # per layer
                row = {"bench": "offload_vs_llamacpp", "side": "ours", "form": name,
                       "batch": batch, "path": "kernel" if cpu.uses_kernel else "torch",
                       "expert_MB": layer.expert_bytes() / 1e6, **summarize(ours)}  # fmt: skip
                rows.append(row)
                print(f"ours {name} b{batch}: best {row['best_pair']['ms']:.1f} ms = "
                      f"{row['best_pair']['share']:.0%}", flush=True)  # fmt: skip
                if theirs:
                    per_expert = 3 * H * INTER * BYTES_PER_WEIGHT[qtype]
                    row = {"bench": "offload_vs_llamacpp", "side": "llama.cpp", "form": qtype,
                           "batch": batch, "expert_MB": per_expert / 1e6, "layers": a.layers,
                           **summarize(theirs)}  # fmt: skip
                    rows.append(row)
                    print(f"llama.cpp {qtype} b{batch}: best {row['best_pair']['ms']:.1f} ms"
                          f" = {row['best_pair']['share']:.0%}", flush=True)  # fmt: skip
            del held, layer, cpu, models
            if qtype:
                q.unlink()
    ratios(rows)
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


def ratios(rows: list[dict]) -> None:
    """ours / llama.cpp time per layer at comparable bytes, best pair and median."""
    by = {(r.get("side"), r.get("form"), r.get("batch")): r for r in rows if "best_pair" in r}
    for ours, theirs in PAIRS_WITH.items():
        for batch in (1, 8):
            o, t = by.get(("ours", ours, batch)), by.get(("llama.cpp", theirs, batch))
            if o and t:
                r = {"bench": "offload_vs_llamacpp_ratio", "ours": ours, "llama.cpp": theirs,
                     "batch": batch,
                     "time_ratio_best": o["best_pair"]["ms"] / t["best_pair"]["ms"],
                     "time_ratio_median": o["median_ms"] / t["median_ms"],
                     "time_ratio_per_round_median": statistics.median(
                         p["ours_ms_same_round"] / p["ms"] for p in t["pairs"]
                     ) if all("ours_ms_same_round" in p for p in t["pairs"]) else None,
                     "share_ours_best": o["best_pair"]["share"],
                     "share_llamacpp_best": t["best_pair"]["share"]}  # fmt: skip
                rows.append(r)
                print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
