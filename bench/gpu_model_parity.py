"""Bisect the CUDA kernel path of the native M3 model against its torch path, op by op.

Runs a tiny random M3 (sparse: top-k 2 blocks over ~6 visible) through chunked prefill and
decode steps on CUDA, once with every Triton op, once with all ops forced to torch
(`M3AGENT_TORCH_OPS=all`), and once per op with only that op forced to torch; prints the
relative logit error of each against the float32 CPU run, as JSON lines.

    python bench/gpu_model_parity.py [--dtype bfloat16] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(
    0, str(Path(__file__).resolve().parent.parent / "tests" / "engine" / "native" / "models")
)
import conftest  # noqa: E402  (tests/engine/native/models: page_tables, make_caches, build_md)
from gpu_parity import SPEC, SPLITS, chunked_logits, prompt_ids  # noqa: E402
from m3agent.engine.native.loaders.checkpoint import load_model  # noqa: E402
from m3agent.engine.native.loaders.tiny import init_tiny  # noqa: E402

OPS = ("insert_kv", "insert_index", "dense_attention", "index_select_blocks", "sparse_attention")


def run(model, ids, device, splits):
    return chunked_logits(model, ids, conftest, device, splits)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    ckpt = init_tiny(Path(tempfile.mkdtemp()) / "tiny", SPEC)
    ids, splits = prompt_ids(), SPLITS
    cpu = run(load_model(ckpt), ids, "cpu", splits)
    rows = []
    for forced in ("", "all", *OPS):
        os.environ["M3AGENT_TORCH_OPS"] = forced  # read when the model is built
        got = run(load_model(ckpt, device="cuda", dtype=dtype), ids, "cuda", splits)
        err = ((got - cpu).abs().max() / cpu.abs().max()).item()
        per_split, c0 = [], 0
        for n in splits:
            seg = slice(c0, c0 + n)
            per_split.append(round(((got[seg] - cpu[seg]).abs().max() / cpu.abs().max()).item(), 5))
            c0 += n
        row = {
            "dtype": a.dtype,
            "torch_ops": forced or "none",
            "rel_err": round(err, 5),
            "per_chunk": per_split,
            "argmax_agree": round((got.argmax(-1) == cpu.argmax(-1)).float().mean().item(), 4),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    os.environ.pop("M3AGENT_TORCH_OPS", None)
    if a.out:
        a.out.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


if __name__ == "__main__":
    main()
