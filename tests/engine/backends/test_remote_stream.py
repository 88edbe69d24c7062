"""StreamDecoder: however the server cuts `content`, the decoded result is the same."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from m3agent.engine.api import ContentDelta, ReasoningDelta, ToolCallDelta
from m3agent.engine.backends.remote_stream import ContentReparser, StreamDecoder

NS = "]<]minimax[>["
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            },
        },
    }
]
CALL = f'{NS}<tool_call>\n{NS}<invoke name="shell">{NS}<command>ls -l{NS}</command>{NS}<timeout>9{NS}</timeout>{NS}</invoke>\n{NS}</tool_call>'
CASES = [
    # (thinking mode, whole content as the server sent it, expected (reasoning, content, args))
    ("adaptive", "plain answer", ("", "plain answer", [])),
    (
        "adaptive",
        f"<mm:think>hmm</mm:think>Doing.{CALL}",
        ("hmm", "Doing.", [{"command": "ls -l", "timeout": 9}]),
    ),
    ("enabled", "deep thought</mm:think>Result.", ("deep thought", "Result.", [])),
    ("enabled", f"x</mm:think>{CALL}", ("x", "", [{"command": "ls -l", "timeout": 9}])),
    ("disabled", "a < b > c", ("", "a < b > c", [])),
]


def decode(mode: str, pieces: list[str]):
    dec = StreamDecoder(ContentReparser(TOOLS, mode), "http://test")
    out = []
    for p in pieces:
        obj = {"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}
        out += dec.feed_data(json.dumps(obj))
    out += dec.feed_data(
        json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    )
    out += dec.finish()
    reasoning = "".join(d.text for d in out if isinstance(d, ReasoningDelta))
    content = "".join(d.text for d in out if isinstance(d, ContentDelta))
    args = [d.call.arguments for d in out if isinstance(d, ToolCallDelta)]
    return reasoning, content, args


def test_whole_content_cases():
    for mode, text, expected in CASES:
        assert decode(mode, [text]) == expected, (mode, text)


@settings(max_examples=150, deadline=None)
@given(
    case=st.sampled_from(CASES), cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12)
)
def test_chunking_never_changes_the_result(case, cuts):
    mode, text, expected = case
    points = sorted({c % (len(text) + 1) for c in cuts})
    pieces = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True) if b > a]
    assert decode(mode, pieces) == expected


def test_server_reasoning_then_content_in_enabled_mode_is_not_held():
    dec = StreamDecoder(ContentReparser(TOOLS, "enabled"), "http://test")
    dec.feed_data(json.dumps({"choices": [{"index": 0, "delta": {"reasoning_content": "r"}}]}))
    out = dec.feed_data(json.dumps({"choices": [{"index": 0, "delta": {"content": "visible"}}]}))
    # Reasoning came separately, so content streams at once instead of waiting for the end.
    assert [d.text for d in out if isinstance(d, ContentDelta)] == ["visible"]
