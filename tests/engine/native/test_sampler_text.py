"""Sampler filters, the incremental detokenizer and the stop-string filter."""

from __future__ import annotations

import math

import torch
from m3agent.engine.native.core.detokenizer import IncrementalDetokenizer
from m3agent.engine.native.core.sampling_params import native_params
from m3agent.engine.native.core.stop_strings import StopStringFilter
from m3agent.engine.native.runner.sampler import Sampler, apply_top_k_top_p, seeded_generator


def test_top_k_and_top_p_keep_exactly_the_right_tokens():
    logits = torch.log(torch.tensor([0.05, 0.4, 0.1, 0.3, 0.15]))
    kept = lambda x: torch.isfinite(x).nonzero().flatten().tolist()  # noqa: E731
    assert kept(apply_top_k_top_p(logits, 2, 1.0)) == [1, 3]
    assert kept(apply_top_k_top_p(logits, 0, 0.7)) == [1, 3]  # 0.4 + 0.3 reaches 0.7
    assert kept(apply_top_k_top_p(logits, 0, 0.71)) == [1, 3, 4]
    assert kept(apply_top_k_top_p(logits, 0, 0.01)) == [1]  # the top token always stays


def test_sampled_frequencies_follow_the_filtered_distribution():
    logits = torch.log(torch.tensor([[0.05, 0.4, 0.1, 0.3, 0.15]]))
    p = native_params(temperature=1.0, top_k=3)
    gen = seeded_generator(0, "cpu")
    counts = [0] * 5
    for _ in range(4000):
        counts[Sampler()(logits, [p], [gen])[0]] += 1
    assert counts[0] == counts[2] == 0
    assert math.isclose(counts[1] / 4000, 0.4 / 0.85, abs_tol=0.03)
    assert math.isclose(counts[4] / 4000, 0.15 / 0.85, abs_tol=0.03)


def test_greedy_rows_take_the_argmax_next_to_sampled_rows():
    logits = torch.tensor([[0.0, 3.0, 1.0], [5.0, 0.0, 0.0]])
    params = [native_params(), native_params(temperature=0.5, seed=1)]
    out = Sampler()(logits, params, [None, seeded_generator(1, "cpu")])
    assert out[0] == 1 and out[1] in (0, 1, 2)


def test_detokenizer_holds_back_half_characters(char_tokenizer):
    text = "añ€😀 done"
    ids = char_tokenizer.encode(text)
    detok = IncrementalDetokenizer(char_tokenizer, char_tokenizer.encode("prompt "))
    deltas = [detok.add_tokens([i]) for i in ids]
    assert "".join(deltas) + detok.flush() == text
    assert "\ufffd" not in "".join(deltas)
    assert deltas[1] == "" and deltas[2] == "ñ"  # two bytes: nothing, then the character


def test_stop_filter_holds_back_possible_prefixes_and_cuts_the_match():
    f = StopStringFilter(("STOP",))
    assert f.feed("abcST") == "ab"  # "cST" could still become "STOP"
    assert f.feed("Ox") == "cS"
    assert f.feed("STOP! more") == "TOx"
    assert f.matched == "STOP" and f.flush() == "" and f.feed("zzz") == ""
    g = StopStringFilter(("</end>", "X"))
    assert g.feed("ab</en") == "a"
    assert g.feed("d") == "b" and g.matched is None
    assert g.feed(">tail") == "" and g.matched == "</end>"
    h = StopStringFilter(())
    assert h.feed("anything") == "anything" and h.flush() == ""
