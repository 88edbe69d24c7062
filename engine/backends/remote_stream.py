"""Decoding an OpenAI chat-completions SSE stream into ChatDeltas.

The server's parsers (`--reasoning-parser/--tool-call-parser minimax_m3`) normally split the
output; SPEC Addendum lists cases where reasoning markers or tool markup stay in `content`.
So `content` is re-parsed here with our own M3OutputParser: clean content passes through
unchanged, left-over markup becomes reasoning and tool calls as it should have.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..api import (
    ChatDelta,
    EngineError,
    EngineProtocolError,
    ReasoningDelta,
    ToolCall,
    ToolCallDelta,
    Usage,
)
from .remote_format import parse_arguments

THINK_CLOSE = "</mm:think>"


class ContentReparser:
    """Runs server `content` through M3OutputParser.

    In "enabled" mode the server should stream the reasoning as reasoning_content; when it
    does not (no reasoning parser on the server), content starts inside the think block. Until
    either reasoning_content or a `</mm:think>` in content decides which case this is, content
    is held back (a short wait in practice: reasoning comes first)."""

    def __init__(
        self,
        tools: list[dict[str, Any]],
        thinking_mode: str,
        tool_choice: str | dict[str, Any] | None = None,
    ):
        self._tools = tools
        self._mode = thinking_mode
        self._tool_choice = tool_choice
        self._parser: Any = None
        self._held: list[str] = []

    def _start(self, mode: str) -> list[ChatDelta]:
        from ..m3.output_parser import M3OutputParser

        self._parser = M3OutputParser(self._tools, mode, tool_choice=self._tool_choice)
        held, self._held = "".join(self._held), []
        return list(self._parser.feed(held)) if held else []

    def on_reasoning(self) -> list[ChatDelta]:
        return self._start("adaptive") if self._parser is None else []

    def feed(self, text: str) -> list[ChatDelta]:
        if self._parser is None:
            if self._mode != "enabled":
                self._start("adaptive")
            else:
                self._held.append(text)
                if THINK_CLOSE in "".join(self._held):
                    return self._start("enabled")
                return []
        return list(self._parser.feed(text))

    def finish(self) -> list[ChatDelta]:
        out = self._start("adaptive") if self._parser is None else []
        return out + list(self._parser.finish())


@dataclass(slots=True)
class _CallAcc:
    id: str = ""
    name: str = ""
    args: list[str] = field(default_factory=list)


@dataclass(slots=True)
class StreamDecoder:
    """Feed it one decoded SSE `data:` payload at a time; it returns the deltas to yield."""

    reparser: ContentReparser
    origin: str
    calls: dict[int, _CallAcc] = field(default_factory=dict)
    reparsed_calls: list[ToolCall] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    done: bool = False
    generated_any: bool = False

    def feed_data(self, payload: str) -> list[ChatDelta]:
        payload = payload.strip()
        if payload == "[DONE]":
            self.done = True
            return []
        try:
            obj = json.loads(payload)
        except ValueError as e:
            snippet = payload[:80]
            raise EngineProtocolError(
                f"malformed stream from {self.origin}: not JSON ({e}): {snippet!r}"
            ) from e
        if not isinstance(obj, dict):
            raise EngineProtocolError(
                f"malformed stream from {self.origin}: chunk is not an object"
            )
        if "error" in obj:
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else str(err)
            raise EngineError(f"the server {self.origin} failed mid-stream: {msg}")
        out: list[ChatDelta] = []
        for ch in obj.get("choices") or []:
            if not isinstance(ch, dict):
                raise EngineProtocolError(f"malformed stream from {self.origin}: bad choice")
            out.extend(self._choice(ch))
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        return out

    def _choice(self, ch: dict[str, Any]) -> list[ChatDelta]:
        out: list[ChatDelta] = []
        delta = ch.get("delta") or {}
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            out.extend(self._own(self.reparser.on_reasoning()))
            out.append(ReasoningDelta(reasoning))
        content = delta.get("content")
        if content:
            out.extend(self._own(self.reparser.feed(content)))
        for tc in delta.get("tool_calls") or []:
            idx = int(tc.get("index", 0))
            acc = self.calls.setdefault(idx, _CallAcc())
            if tc.get("id") and not acc.id:
                acc.id = tc["id"]
            fn = tc.get("function") or {}
            if fn.get("name") and not acc.name:
                acc.name = fn["name"]
            if fn.get("arguments"):
                acc.args.append(fn["arguments"])
        if ch.get("finish_reason"):
            self.finish_reason = ch["finish_reason"]
        if out or delta.get("tool_calls"):
            self.generated_any = True
        return out

    def _own(self, deltas: list[ChatDelta]) -> list[ChatDelta]:
        """Text passes through; tool calls found in content wait for the end (numbering)."""
        kept: list[ChatDelta] = []
        for d in deltas:
            if isinstance(d, ToolCallDelta):
                self.reparsed_calls.append(d.call)
            else:
                kept.append(d)
        return kept

    def finish(self) -> list[ChatDelta]:
        """Flushes held text and emits every tool call, server ones first, index 0..n-1."""
        out = self._own(self.reparser.finish())
        calls = [
            ToolCall(acc.id, acc.name, parse_arguments("".join(acc.args)))
            for _, acc in sorted(self.calls.items())
        ]
        calls.extend(self.reparsed_calls)
        out.extend(ToolCallDelta(i, c) for i, c in enumerate(calls))
        return out

    def final_usage(self) -> Usage:
        u = self.usage or {}
        details = u.get("prompt_tokens_details") or {}
        return Usage(
            prompt_tokens=int(u.get("prompt_tokens") or 0),
            cached_prompt_tokens=int(details.get("cached_tokens") or 0),
            generated_tokens=int(u.get("completion_tokens") or 0),
            restored_prompt_tokens=int(details.get("restored_tokens") or 0),
            host_prompt_tokens=int(details.get("host_tokens") or 0),
        )
