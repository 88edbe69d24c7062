"""Issue 12 point 3 at CI size: a thinking toggle every turn, through `m3agent serve` (chat
endpoint, raw_text history) and through the remote backend (renders itself, token ids to
/v1/completions), both against a real HTTP server on 127.0.0.1 over a tiny native M3 on CPU.
Every turn after the first recomputes at most its new tokens plus one 128-token page.
bench/toggle_session.py runs the same at 100K tokens."""

from __future__ import annotations

import pytest

from ...support.bench import load_bench


@pytest.fixture(scope="module")
def toggle():
    return load_bench("toggle_session")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The serve benchmarks' tiny M3 (bench/serve_load.py's)."""
    return load_bench("serve_load").tiny_model(tmp_path_factory.mktemp("m"))


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
