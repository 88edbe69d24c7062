"""A fake `vllm` 0.33.0 package (tests/engine/backends/vllm/fake_pkg/vllm), copied into a temp dir that the
tests put on sys.path.

It mirrors the slice of vLLM's API the backend uses, with vLLM's signatures and validation:
AsyncEngineArgs is a dataclass with 0.33.0's field names (an unknown argument is a TypeError),
SamplingParams checks its values with vLLM's rules and raises VLLMValidationError with vLLM's
messages, AsyncLLM.generate validates the prompt after media expansion (one placeholder per
item) and raises as vLLM does. test_fake_matches_vllm.py compares the field names with the
real 0.33.0 source when the downloaded wheel is at hand. It records every engine argument,
prompt and sampling parameter, streams scripted raw M3 text in small delta chunks, and counts
cached prompt tokens with a block-wise prefix match over earlier prompts.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

PACKAGE = Path(__file__).parent / "fake_pkg" / "vllm"


def _forget() -> None:
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


def install(root: Path) -> None:
    """Copies the package under root/vllm and makes it importable (fresh each time)."""
    shutil.copytree(
        PACKAGE, root / "vllm", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    _forget()
    sys.path.insert(0, str(root))


def uninstall(root: Path) -> None:
    _forget()
    if str(root) in sys.path:
        sys.path.remove(str(root))
