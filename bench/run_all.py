"""Run the whole benchmark suite in one process (one device call, < 9 minutes): ceilings
first, then every PROTOCOL row; writes one JSON file with the environment (date, GPU,
torch / triton versions, nvidia-smi clocks before and after) and every row.

    python bench/run_all.py [--out DIR] [--only idx_decode,layer_decode ...]
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_dir import add_out_arg, dated_json  # noqa: E402

ROWS = [
    "idx_decode",
    "sparse_decode_attn",
    "layer_decode",
    "idx_prefill",
    "sparse_prefill_attn",
    "layer_prefill_chunk",
]


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out_arg(ap)
    ap.add_argument("--only", default="")
    ap.add_argument("--tag", default="h200")
    args = ap.parse_args()
    import torch
    from common import ceilings, env_record

    if not torch.cuda.is_available():
        sys.exit("run_all needs a CUDA GPU")
    t_start = time.time()
    record = {"env": env_record(), "rows": [], "errors": {}, "timings_s": {}}
    path = dated_json(args.out, f"bench_{args.tag}", record["env"]["date"])

    def save() -> None:
        record["env"]["nvidia_smi_after"] = env_record()["nvidia_smi"]
        record["wall_s"] = time.time() - t_start
        path.write_text(json.dumps(record, indent=1))

    ceil = ceilings(record["rows"])
    names = [n for n in ROWS if not args.only or n in args.only.split(",")]
    for name in names:
        t0 = time.time()
        try:
            importlib.import_module(name).run(record["rows"], ceil)
        except BaseException as exc:  # one row's failure must not lose the others
            record["errors"][name] = "".join(traceback.format_exception(exc))[-3000:]
            print(f"[{name}] FAILED: {exc}", flush=True)
            if isinstance(exc, KeyboardInterrupt):
                raise
        record["timings_s"][name] = time.time() - t0
        torch.cuda.empty_cache()
        save()
    save()
    print(f"wrote {path} in {time.time() - t_start:.0f}s", flush=True)


if __name__ == "__main__":
    main()
