"""Issue 12 point 3 at CI size: a thinking toggle every turn, through `m3agent serve` (chat
endpoint, raw_text history) and through the remote backend (renders itself, token ids to
/v1/completions), both against a real HTTP server on 127.0.0.1 over a tiny native M3 on CPU.
Every turn after the first recomputes at most its new tokens plus one 128-token page.
bench/toggle_session.py runs the same at 100K tokens."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "toggle_session.py"


@pytest.fixture(scope="module")
def toggle():
    spec = importlib.util.spec_from_file_location("toggle_session", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    return init_tiny(
        tmp_path_factory.mktemp("m") / "tiny",
        TinySpec(
            layers=2,
            hidden=64,
            heads=1,
            kv_heads=1,
            head_dim=32,
            experts=2,
            dense_layers=1,
            intermediate=64,
            dense_intermediate=64,
        ),
    )


def test_toggle_every_turn_recomputes_only_new_tokens(toggle, tiny):
    result = toggle.measure(tiny, snapshot_tokens=3000, turns=6)
    for path in ("serve", "remote"):
        rows = result[path]["rows"]
        assert [r["mode"] for r in rows] == ["enabled", "disabled", "adaptive"] * 2
        assert rows[0]["prompt_tokens"] > 3000
        for r in rows[1:]:
            assert r["recomputed_tokens"] <= r["new_tokens"] + 128, (path, r)
            assert r["cached_tokens"] >= rows[0]["prompt_tokens"] - 128, (path, r)
    # Both clients sent the same conversation: the same prompts, token for token.
    assert [r["prompt_tokens"] for r in result["serve"]["rows"]] == [
        r["prompt_tokens"] for r in result["remote"]["rows"]
    ]
