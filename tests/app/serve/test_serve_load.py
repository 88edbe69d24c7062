"""bench/serve_load.py at CI size: a real `m3agent serve` (tiny native M3, CPU) under 1 and 4
concurrent clients, streamed and not, a shared prefix; every request answered, the prefix
cache serving the shared part, the server's RSS bounded and not growing when a level runs
again. The full run (1/4/16/64 clients, 520 requests, ~3K-token prefix) writes
bench/results/serve_load_cpu.json; `--soak` repeats one level (serve_soak_*.json)."""

from __future__ import annotations

from ...support.bench import load_bench


def test_serve_load_ci_subset(tmp_path):
    bench = load_bench("serve_load")
    model = bench.tiny_model(tmp_path)
    result = bench.measure(model, levels=(1, 4, 4), requests=8, prefix_tokens=600, max_tokens=2)
    assert result["total_requests"] == 24
    assert result["total_ok"] == 24, [lv["errors"] for lv in result["levels"]]
    for lv in result["levels"]:
        assert lv["streamed"] == 4 and lv["latency_p99_s"] >= lv["latency_p50_s"] > 0
        # After the first request, every other one finds the shared prefix cached.
        assert lv["cached_share"] > 0.6, lv
        assert lv["rss_mb"]["peak"] - lv["rss_mb"]["before"] < 200, lv
    # The same level again (its buffers and the allocator's working set exist already): the
    # server's resident memory stays within noise; a leak of even 1 MB per request does not.
    again = result["levels"][2]["rss_mb"]
    assert again["after"] - again["before"] < 8, result["levels"]
