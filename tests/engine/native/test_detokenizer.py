"""The one streaming detokenizer (engine/native/core/detokenizer.py) over M3's real tokenizer:
text deltas from token ids that join to the full decode and never split a UTF-8 character."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from m3agent.engine.m3 import tokens as T
from m3agent.engine.m3.tokenizer import M3Tokenizer
from m3agent.engine.native.core.detokenizer import IncrementalDetokenizer


@pytest.fixture(scope="module")
def tok():
    return M3Tokenizer.default()


def _stream(tok: M3Tokenizer, ids: list[int]) -> list[str]:
    d = IncrementalDetokenizer(tok)
    return [d.add_tokens([i]) for i in ids] + [d.flush()]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.sampled_from(["", T.THINK_START, T.EOS, T.NS]))
def test_deltas_join_to_the_text_with_markers(text, marker):
    tok = M3Tokenizer.default()
    s = text + marker + text
    pieces = _stream(tok, tok.encode(s))
    assert "".join(pieces) == s
    assert all("\ufffd" not in p for p in pieces) or "\ufffd" in s


def test_holds_an_incomplete_utf8_character(tok):
    ids = tok.encode("a🎉")
    assert len(ids) > 2  # the emoji is several byte tokens in this small vocab
    pieces = _stream(tok, ids)
    assert pieces[0] == "a" and all(p == "" for p in pieces[1:-2]) and pieces[-2] == "🎉"
    assert pieces[-1] == ""  # nothing left for flush


def test_flush_releases_truncated_bytes(tok):
    ids = tok.encode("é")[:-1] if len(tok.encode("é")) > 1 else None
    if ids is None:
        pytest.skip("é is one token")
    pieces = _stream(tok, ids)
    assert pieces[:-1] == [""] * len(ids) and pieces[-1] == "\ufffd"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 8191), max_size=40))
def test_arbitrary_ids_stream_as_the_full_decode(ids):
    tok = M3Tokenizer.default()
    full = tok.decode(ids)
    streamed = "".join(_stream(tok, ids))
    if "\ufffd" not in full:
        assert streamed == full
    else:  # invalid UTF-8 from random byte tokens: the same text around the replacements
        assert streamed.replace("\ufffd", "") == full.replace("\ufffd", "")
