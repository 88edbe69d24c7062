"""The benchmark scripts under bench/ as modules, for the tests that run their CI subsets
(the scripts are not a package: each is loaded from its file)."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


@functools.cache
def load_bench(name: str) -> ModuleType:
    """bench/NAME.py, executed once per test process."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
