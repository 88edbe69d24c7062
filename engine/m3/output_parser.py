"""M3 output text -> reasoning / content / tool-call deltas, incrementally (SPEC §4.1–4.6).

Composition as vLLM's DelegatingParser: reasoning is split off first, tool calls are parsed
from the content only (a tool block inside the think block stays reasoning). Feeding the text
whole or in any chunks gives the same deltas modulo how text is cut, and the concatenation of
the deltas equals `parse_output` of the whole text.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..api import ChatDelta, ContentDelta, ReasoningDelta, ToolCall, ToolCallDelta
from .reasoning_parser import ReasoningParser, Segment
from .tool_parser import CallIds, ToolCallParser


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    reasoning: str | None
    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)


class M3OutputParser:
    """One instance per generation (it is stateful). `id_seed` makes tool-call ids repeatable.

    `tools` and `tool_choice` are the request's: without tools, or with tool_choice "none",
    tool markup stays content (as vLLM returns it).
    """

    def __init__(
        self,
        tools: Sequence[dict[str, Any]] = (),
        thinking_mode: str = "adaptive",
        *,
        tool_choice: str | dict[str, Any] | None = None,
        id_seed: int | None = None,
    ):
        self._reasoning = ReasoningParser(thinking_mode)
        self._tools = ToolCallParser(tools, CallIds(id_seed), tool_choice=tool_choice)
        self._finished = False

    @property
    def reasoning_seen(self) -> bool:
        """True once a think block was opened (then reasoning is "" rather than None)."""
        return self._reasoning.reasoning_seen

    @property
    def num_tool_calls(self) -> int:
        """Calls emitted so far (a finish reason of "tool_calls" when > 0)."""
        return self._tools.num_calls

    def feed(self, text: str) -> list[ChatDelta]:
        if self._finished:
            raise ValueError("feed() after finish(): use a new M3OutputParser per generation")
        return self._route(self._reasoning.feed(text)) if text else []

    def finish(self) -> list[ChatDelta]:
        if self._finished:
            return []
        self._finished = True
        out = self._route(self._reasoning.finish())
        out.extend(self._tools.finish())
        return out

    def _route(self, segments: Iterator[Segment]) -> list[ChatDelta]:
        out: list[ChatDelta] = []
        for kind, text in segments:  # a generator: lock() below affects its next segments
            if kind == "reasoning":
                out.append(ReasoningDelta(text))
            else:
                out.extend(self._tools.feed(text))
                if self._tools.in_tool_block:
                    self._reasoning.lock()
        return out


def collect(deltas: Sequence[ChatDelta], reasoning_seen: bool) -> ParsedOutput:
    """Fold deltas into one ParsedOutput (content "" -> None, as vLLM returns it)."""
    reasoning = "".join(d.text for d in deltas if isinstance(d, ReasoningDelta))
    content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
    calls = [d.call for d in deltas if isinstance(d, ToolCallDelta)]
    return ParsedOutput(reasoning if reasoning_seen else None, content or None, calls)


def parse_output(
    text: str,
    tools: Sequence[dict[str, Any]] = (),
    thinking_mode: str = "adaptive",
    *,
    tool_choice: str | dict[str, Any] | None = None,
    id_seed: int | None = None,
) -> ParsedOutput:
    parser = M3OutputParser(tools, thinking_mode, tool_choice=tool_choice, id_seed=id_seed)
    deltas = parser.feed(text) + parser.finish()
    return collect(deltas, parser.reasoning_seen)


__all__ = ["M3OutputParser", "ParsedOutput", "Segment", "collect", "parse_output"]
