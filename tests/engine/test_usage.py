"""Usage and EngineStats: one engine call's figures, a turn's (Usage.then) and an engine's
totals (EngineStats.plus), each summed once here for the loop, the engines and /cost."""

from __future__ import annotations

from dataclasses import asdict

from m3agent.engine.api import EngineStats, Usage

FIRST = Usage(1000, 900, 20, time_to_first_token_s=0.5, total_time_s=2.0)
MISS = Usage(1200, 0, 30, time_to_first_token_s=3.0, total_time_s=4.0, cache_miss_reason="x")
LATER = Usage(1300, 1200, 10, total_time_s=1.0, cache_miss_reason="y")


def test_a_turn_sums_its_calls_and_keeps_the_first_wait_and_miss():
    turn = Usage().then(FIRST).then(MISS).then(LATER)
    assert (turn.prompt_tokens, turn.cached_prompt_tokens, turn.generated_tokens) == (
        3500,
        2100,
        60,
    )
    assert turn.recomputed_prompt_tokens == 1400
    assert turn.time_to_first_token_s == 0.5  # what the user waited for the first token
    assert turn.total_time_s == 7.0
    assert turn.cache_miss_reason == "x"  # the turn's first miss, not the last


def test_a_turn_without_timings_has_none():
    assert Usage().then(Usage(5, 0, 1)) == Usage(5, 0, 1)
    assert Usage().then(Usage(5, 0, 1)).total_time_s is None


def test_engine_stats_count_requests_and_tokens():
    stats = EngineStats().plus(FIRST).plus(MISS)
    assert stats == EngineStats(2200, 900, 50, requests=2)
    # the JSON of both: the token counts first, as before they shared TokenCounts
    assert list(asdict(FIRST))[:3] == list(asdict(stats))[:3]
