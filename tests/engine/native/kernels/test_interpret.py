"""Every Triton kernel against its plain-torch reference on the CPU, through Triton's
interpreter (TRITON_INTERPRET=1 must be set before triton.jit runs, hence one subprocess
that runs all cases; each test then reads its own case's verdict)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

CASES = Path(__file__).with_name("kernel_cases.py")
NAMES = [
    "moe_bf16",
    "moe_fp8",
    "moe_mxfp8",
    "moe_prefill",
    "moe_decode_t1",
    "add_rmsnorm",
    "swiglu",
    "insert",
    "fused",
    "select_prefill",
    "select_decode_q1",
    "select_decode_q3_init",
    "sparse_prefill",
    "sparse_decode_q1",
    "sparse_mixed",
    "decode_chunks",
    "decode_fused_merge",
    "dense",
    "dense_split",
    "topk",
    "topk_two_stage",
    "select_fp8",
    "sparse_fp8",
]


@pytest.fixture(scope="module")
def verdicts() -> dict[str, str]:
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, str(CASES), *NAMES], env=env, capture_output=True, text=True, timeout=280
    )
    lines = {ln.split(" ", 1)[0]: ln for ln in proc.stdout.splitlines() if " " in ln}
    lines["__stderr__"] = proc.stderr[-3000:]
    return lines


@pytest.mark.parametrize("name", NAMES)
def test_kernel_matches_reference_in_interpreter(name: str, verdicts: dict[str, str]) -> None:
    line = verdicts.get(name, f"{name} MISSING\n{verdicts['__stderr__']}")
    assert line.startswith(f"{name} ok"), line
