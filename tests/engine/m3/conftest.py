"""Shared fixtures of the M3-format tests: SPEC §4.5's tools and a chunked-feeding helper."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from m3agent.engine.api import ContentDelta, ReasoningDelta, ToolCallDelta
from m3agent.engine.m3.output_parser import M3OutputParser, collect

from ...support.markup import function_tool

SPEC_TOOLS = [
    function_tool(
        "run_shell",
        "Run a shell command.",
        command="string",
        timeout="integer",
        background="boolean",
    ),
    function_tool(
        "edit_file",
        path="string",
        edits={
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
            },
        },
    ),
    function_tool(
        "read_file",
        path="string",
        lines={"type": "array", "items": {"type": "integer"}},
        opts="object",
    ),
]


@pytest.fixture(scope="session")
def spec_tools():
    return SPEC_TOOLS


def feed_chunks(text, tools, mode, sizes, seed=7):
    """Feed `text` in chunks of the given sizes (cycled); returns (deltas, reasoning_seen)."""
    p = M3OutputParser(tools, mode, id_seed=seed)
    deltas, i, k = [], 0, 0
    while i < len(text):
        n = max(1, sizes[k % len(sizes)])
        deltas += p.feed(text[i : i + n])
        i, k = i + n, k + 1
    deltas += p.finish()
    return deltas, p.reasoning_seen


def merged(deltas):
    """Deltas with adjacent text pieces of one kind joined: what any chunking must agree on."""
    out = []
    for d in deltas:
        if isinstance(d, ReasoningDelta | ContentDelta) and out and type(out[-1]) is type(d):
            out[-1] = type(d)(out[-1].text + d.text)
        elif isinstance(d, ReasoningDelta | ContentDelta | ToolCallDelta):
            if isinstance(d, ReasoningDelta | ContentDelta) and not d.text:
                raise AssertionError(f"empty text delta {d!r}")
            out.append(d)
        else:
            raise AssertionError(f"unexpected delta {d!r}")
    return out


def parse_chunked(text, tools, mode, sizes, seed=7):
    deltas, seen = feed_chunks(text, tools, mode, sizes, seed)
    return collect(deltas, seen)


@pytest.fixture(scope="session")
def m3h():
    """The helpers above, as a fixture (test modules cannot import conftest in importlib mode)."""
    return SimpleNamespace(
        feed_chunks=feed_chunks, merged=merged, parse_chunked=parse_chunked, tools=SPEC_TOOLS
    )
