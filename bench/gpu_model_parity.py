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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "native_model"))
from conftest import build_md, make_caches, page_tables  # noqa: E402
from m3agent.engine.native.core.model_api import LayerCache  # noqa: E402
from m3agent.engine.native.loaders.checkpoint import load_model  # noqa: E402
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny  # noqa: E402

OPS = ("insert_kv", "insert_index", "dense_attention", "index_select_blocks", "sparse_attention")


def run(model, ids, device, splits):
    gen = torch.Generator().manual_seed(0)
    nb = -(-len(ids) // 128) + 2
    tables = page_tables([len(ids)], nb, gen)
    caches = [
        LayerCache(kv=c.kv.to(device), index=None if c.index is None else c.index.to(device))
        for c in make_caches(model, nb, dtype=model.info.dtype)
    ]
    out, c0 = [], 0
    with torch.inference_mode():
        for n in splits:
            md = build_md([(c0, n)], tables, device=device)
            h = model.forward(torch.tensor(ids[c0 : c0 + n], device=device), caches, md)
            out.append(model.compute_logits(h).float().cpu())
            c0 += n
    return torch.cat(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    dtype = getattr(torch, a.dtype)
    ckpt = init_tiny(
        Path(tempfile.mkdtemp()) / "tiny",
        TinySpec(
            layers=3,
            hidden=256,
            heads=8,
            kv_heads=2,
            experts=4,
            dense_layers=1,
            topk_blocks=2,
            seed=4,
        ),
    )
    ids = torch.randint(0, 512, (700,), generator=torch.Generator().manual_seed(1)).tolist()
    splits = [300, 256, 140] + [1] * 4
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
