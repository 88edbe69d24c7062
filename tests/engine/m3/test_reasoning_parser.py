"""SPEC §4.6's table, its streaming examples, and the Addendum's reasoning pitfalls."""

from __future__ import annotations

import pytest
from m3agent.engine.api import ContentDelta, ReasoningDelta
from m3agent.engine.m3.output_parser import parse_output
from m3agent.engine.m3.tokens import NS

NOT_ENABLED = ["adaptive", "disabled"]

TABLE = [
    ("enabled", "plan A</mm:think>answer", ("plan A", "answer")),
    ("enabled", "<mm:think>plan B</mm:think>answer", ("plan B", "answer")),
    ("enabled", "answer only", ("answer only", None)),
    ("enabled", "</mm:think>answer", ("", "answer")),
    *[(m, "<mm:think>plan B</mm:think>answer", ("plan B", "answer")) for m in NOT_ENABLED],
    *[(m, "</mm:think>answer", (None, "answer")) for m in NOT_ENABLED],
    *[(m, "plan A</mm:think>answer", (None, "plan A</mm:think>answer")) for m in NOT_ENABLED],
    *[(m, "answer only", (None, "answer only")) for m in NOT_ENABLED],
]


@pytest.mark.parametrize(("mode", "text", "expected"), TABLE)
@pytest.mark.parametrize("chunk", [0, 1, 2, 5])
def test_spec_table(mode, text, expected, chunk, m3h):
    out = m3h.parse_chunked(text, [], mode, [chunk or len(text)])
    assert (out.reasoning, out.content) == expected
    assert out.tool_calls == []


@pytest.mark.parametrize("mode", NOT_ENABLED)
def test_general_rule_content_around_think_block(mode, m3h):
    text = "pre <mm:think>inner</mm:think> post"
    for chunk in (1, 3, len(text)):
        out = m3h.parse_chunked(text, [], mode, [chunk])
        assert (out.reasoning, out.content) == ("inner", "pre  post")
    assert parse_output("x<mm:think>never closed", [], mode).reasoning == "never closed"
    # only the first think block is one; a second opener after it is plain content
    out = parse_output("<mm:think>a</mm:think>b<mm:think>c", [], mode)
    assert (out.reasoning, out.content) == ("a", "b<mm:think>c")
    # only ONE stray leading closer is dropped
    out = parse_output("</mm:think></mm:think>x", [], mode)
    assert out.content == "</mm:think>x"


def test_streaming_example_enabled(m3h):
    deltas, _ = m3h.feed_chunks("I should ls.</mm:think>Done.", [], "enabled", [4])
    reasoning = [d.text for d in deltas if isinstance(d, ReasoningDelta)]
    content = [d.text for d in deltas if isinstance(d, ContentDelta)]
    assert "".join(reasoning) == "I should ls." and "".join(content) == "Done."
    first_content = next(i for i, d in enumerate(deltas) if isinstance(d, ContentDelta))
    assert all(isinstance(d, ReasoningDelta) for d in deltas[:first_content])
    assert reasoning[0] == "I sh"  # streamed as it arrives, not held to the end


def test_streaming_example_disabled(m3h):
    deltas, _ = m3h.feed_chunks("</mm:think>Done.", [], "disabled", [1])
    assert all(isinstance(d, ContentDelta) for d in deltas)
    assert "".join(d.text for d in deltas) == "Done."


@pytest.mark.parametrize("mode", ["enabled", "adaptive", "disabled"])
def test_nested_opener_is_reasoning_text(mode, m3h):
    # vLLM's extract_reasoning partitions on the first opener, then the first closer
    for chunk in (1, 3, 100):
        out = m3h.parse_chunked("<mm:think>a<mm:think>b</mm:think>c", [], mode, [chunk])
        assert (out.reasoning, out.content) == ("a<mm:think>b", "c")


@pytest.mark.parametrize("mode", NOT_ENABLED)
def test_leading_closer_makes_the_rest_plain_content(mode, m3h):
    for chunk in (1, 4, 100):
        out = m3h.parse_chunked("</mm:think>a<mm:think>b</mm:think>c", [], mode, [chunk])
        assert (out.reasoning, out.content) == (None, "a<mm:think>b</mm:think>c")


def test_empty_reasoning_block_is_empty_string_streamed_too(m3h):
    for chunk in (1, 100):
        out = m3h.parse_chunked("<mm:think></mm:think>hi", [], "adaptive", [chunk])
        assert (out.reasoning, out.content) == ("", "hi")


def test_lt_at_end_of_reasoning_step_not_lost(spec_tools, m3h):
    # Addendum: vLLM loses a '<' held as a possible <mm:think> when reasoning closes.
    text = (
        f'plan</mm:think>{NS}<tool_call>{NS}<invoke name="run_shell">{NS}<command>ls'
        f"{NS}</command>{NS}</invoke>{NS}</tool_call>"
    )
    cut = text.index(NS) + len(NS) + 1  # a chunk ends right after the '<'
    deltas, seen = m3h.feed_chunks(text, spec_tools, "enabled", [cut, len(text)])
    calls = [d.call for d in deltas if not isinstance(d, ReasoningDelta | ContentDelta)]
    assert [(c.name, c.arguments) for c in calls] == [("run_shell", {"command": "ls"})]
    assert not any(isinstance(d, ContentDelta) for d in deltas)


@pytest.mark.parametrize("mode", ["enabled", "adaptive", "disabled"])
@pytest.mark.parametrize("tail", ["<", "</mm:th", "<mm:thi", "</mm:think"])
def test_partial_marker_at_stream_end_is_kept(mode, tail, m3h):
    for chunk in (1, 100):
        out = m3h.parse_chunked("text " + tail, [], mode, [chunk])
        got = out.reasoning if mode == "enabled" else out.content
        assert got == "text " + tail


def test_tool_block_inside_think_block_stays_reasoning(spec_tools):
    call = f'{NS}<tool_call>{NS}<invoke name="run_shell">{NS}<command>ls{NS}</command>{NS}</invoke>{NS}</tool_call>'
    out = parse_output(f"<mm:think>maybe {call}</mm:think>ok", spec_tools, "adaptive")
    assert out.tool_calls == [] and out.reasoning == f"maybe {call}" and out.content == "ok"
    unclosed = parse_output(f"thinking {call}", spec_tools, "enabled")
    assert unclosed.tool_calls == [] and unclosed.reasoning == f"thinking {call}"
    assert unclosed.content is None


def test_composed_example(spec_tools):
    text = (
        f'I need the listing.</mm:think>Checking.{NS}<tool_call>\n{NS}<invoke name="run_shell">'
        f"{NS}<command>ls{NS}</command>{NS}</invoke>\n{NS}</tool_call>"
    )
    out = parse_output(text, spec_tools, "enabled")
    assert (out.reasoning, out.content) == ("I need the listing.", "Checking.")
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("run_shell", {"command": "ls"})]


def test_think_markers_inside_tool_arguments_are_kept(spec_tools, m3h):
    # Once the tool block started, think markers are argument text (e.g. editing this repo).
    body = "grep -n '<mm:think>' x.py && echo '</mm:think>'"
    text = (
        f'{NS}<tool_call>{NS}<invoke name="run_shell">{NS}<command>{body}{NS}</command>'
        f"{NS}</invoke>{NS}</tool_call>"
    )
    for mode in ("adaptive", "disabled", "enabled"):
        full = ("r</mm:think>" if mode == "enabled" else "") + text
        for chunk in (1, 7, len(full)):
            out = m3h.parse_chunked(full, spec_tools, mode, [chunk])
            assert [c.arguments["command"] for c in out.tool_calls] == [body]
