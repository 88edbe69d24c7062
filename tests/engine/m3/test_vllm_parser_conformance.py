"""Our parsers against vLLM 0.33.0's non-streaming M3 results, under every chunking.

The cases and how each expected value was derived from vLLM's source: vllm_conformance_cases.py
(the tool schemas and markup builders they use: vllm_conformance_markup.py).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from m3agent.engine.m3.output_parser import M3OutputParser, collect, parse_output
from vllm_conformance_cases import CASES, DEVIATIONS, IDS
from vllm_conformance_markup import Case


def _feed(case: Case, sizes: list[int]):
    p = M3OutputParser(list(case.tools), case.mode, tool_choice=case.tool_choice, id_seed=1)
    deltas, i, k = [], 0, 0
    while i < len(case.text):
        n = max(1, sizes[k % len(sizes)])
        deltas += p.feed(case.text[i : i + n])
        i, k = i + n, k + 1
    deltas += p.finish()
    out = collect(deltas, p.reasoning_seen)
    return out.reasoning, out.content, [(c.name, c.arguments) for c in out.tool_calls]


def _exact(got, expected):
    """Equal, with JSON types too (4.0 is not 4, True is not 1)."""
    assert got == expected
    assert repr(got) == repr(expected)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_whole_text(case):
    out = parse_output(case.text, list(case.tools), case.mode, tool_choice=case.tool_choice)
    _exact(
        (out.reasoning, out.content, [(c.name, c.arguments) for c in out.tool_calls]), case.expected
    )


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("sizes", [[1], [2], [3, 1, 7], [13]], ids=["1", "2", "3-1-7", "13"])
def test_fixed_chunkings(case, sizes):
    _exact(_feed(case, sizes), case.expected)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    idx=st.integers(0, len(CASES) - 1),
    sizes=st.lists(st.integers(min_value=1, max_value=20), min_size=1, max_size=10),
)
def test_random_chunkings(idx, sizes):
    _exact(_feed(CASES[idx], sizes), CASES[idx].expected)


@pytest.mark.parametrize("case", DEVIATIONS, ids=[c.id for c in DEVIATIONS])
@pytest.mark.parametrize("sizes", [[10**9], [1], [5, 2]], ids=["whole", "1", "5-2"])
def test_deliberate_deviations(case, sizes):
    _exact(_feed(case, sizes), case.expected)
