"""Real `m3agent run` sessions SIGKILLed at random points, their logs then cut at a random byte
(power cuts, often mid-way through a multi-byte character): every one resumes with a valid
history. The CI subset of bench/session_durability.py (its long run: 100 sessions)."""

from __future__ import annotations

from ..support.bench import load_bench


def test_killed_and_cut_sessions_all_resume(tmp_path):
    result = load_bench("session_durability").measure(tmp_path, runs=10, seed=5)
    assert result["failures"] == [], result["failures"]
    assert result["resumed_ok"] == 10
    # The cuts did land in the places that used to fail: mid-character and mid-record.
    assert result["cuts_mid_character"] >= 4
    assert result["cuts_at_a_record_boundary"] < 10
