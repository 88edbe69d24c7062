"""Issue 40: app/ imports at a module's top what every use of it needs; an import left inside
a function names an expensive module that only some paths need, listed with its reason in
bench/deferred_imports.py (whose run measures each one's cost)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("deferred", ROOT / "bench" / "deferred_imports.py")
assert _spec is not None and _spec.loader is not None
deferred = importlib.util.module_from_spec(_spec)
sys.modules["deferred"] = deferred  # dataclasses look their module up there
_spec.loader.exec_module(deferred)


def test_every_function_level_import_has_a_reason() -> None:
    unexplained = [
        f"{s.file}:{s.line} {s.module}"
        for s in deferred.sites()
        if not (s.in_try or s.cycle or deferred.reason(s.module, s.file))
    ]
    assert not unexplained, "move these to the module's top, or name them in DEFERRED"


def test_at_most_the_budget() -> None:
    assert len(deferred.sites()) <= deferred.MOST


def test_the_walk_finds_a_planted_import(tmp_path: Path) -> None:
    # control: an import inside a nested function is found, resolved and left unexplained
    (tmp_path / "app" / "tui").mkdir(parents=True)
    (tmp_path / "app" / "tui" / "x.py").write_text(
        "import os\n"
        "def outer():\n"
        "    def inner():\n"
        "        from ..settings import load_settings\n"
        "        from .screens import plan_screen\n"
        "    try:\n"
        "        import vllm\n"
        "    except ImportError:\n"
        "        pass\n"
    )
    found = deferred.sites(root=tmp_path)
    assert [(s.line, s.module, s.in_try) for s in found] == [
        (4, "m3agent.app.settings", False),
        (5, "m3agent.app.tui.screens", False),
        (7, "vllm", True),
    ]
    assert deferred.reason("m3agent.app.settings") is None
    assert deferred.reason("m3agent.app.tui.screens") is not None
