"""Where the GPU benchmarks that write one dated JSON (run_all.py, moe_grouped.py,
native_long_context.py, stack_engine.py) put it: --out, by default $OUT when a device run sets
it, else bench/results. Imported by name: the scripts run from this folder's path."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def add_out_arg(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--out", default=os.environ.get("OUT") or str(Path(__file__).parent / "results")
    )


def dated_json(out: str, stem: str, date: str) -> Path:
    """out/STEM_YYYY-MM-DD.json for the ISO timestamp date; makes out if need be."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{stem}_{date[:10]}.json"
