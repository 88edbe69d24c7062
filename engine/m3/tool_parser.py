"""Incremental M3 tool-call parser over the content text, with vLLM 0.33.0's results.

What it returns equals what vLLM's non-streaming chat path returns for the same content
(`parser/abstract_parser.py::DelegatingParser._extract_tool_calls` over the minimax_m3 parser
engine, `parser/minimax_m3.py`, `parser/engine/parser_engine.py::_build_extracted_result`),
under any chunking of the text:

* No tools offered, or tool_choice "none": no parsing at all, the markup stays content
  (`_extract_tool_calls` returns the content as is for tool_choice "none"; a request without
  tools has tool_choice "none").
* Otherwise ("auto", "required", a named tool: M3 parses its own syntax for all of them):
  text before the first `NS<tool_call>` is content. From there on everything is tool region
  (text between and after invokes is dropped, a later invoke still counts). An invoke starts
  at `NS<invoke name=` (then `"`, `'` or nothing); its name runs to the first `">`, `'>` or
  `>` (a complete marker such as `NS</invoke>` inside it is name text) and is stripped; its
  body runs to the first `NS</invoke>`, or to the end of the text when truncated.
* A call needs a non-empty name (or an empty name with a JSON body carrying one). When the
  region yields no call at all (prose, empty names, truncated before a name), the whole
  content, markup included, is returned as content (vLLM's non-engine path does not strip
  it); for "required"/named tool choice a whitespace-only content then becomes None.
* With calls, whitespace-only content before the block is dropped; other content is kept
  unstripped.

Calls are emitted whole when their `NS</invoke>` arrives (M3 arguments are not prefix-stable),
or at `finish()`. Deliberate differences from vLLM (SPEC Addendum): each invoke is typed with
its *own* tool's schema (vLLM looks the schema up by argument text, so byte-identical bodies
get the first tool's schema), and a name holding a quote (`name="a" x="y"` gives vLLM the name
`a" x="y`) is malformed: that invoke is dropped.
"""

from __future__ import annotations

import json
import random
import re
import secrets
from collections.abc import Sequence
from enum import Enum
from typing import Any

from ..api import ContentDelta, ToolCall, ToolCallDelta
from .schema_coerce import properties_of, refine_arguments
from .tokens import (
    INVOKE_END,
    NS,
    TOOL_CALL_END,
    TOOL_CALL_START,
    held_suffix_len,
)
from .xml_args import convert_arguments, parse_invoke_body

INVOKE_PREFIX = NS + "<invoke name="
# Complete markers that are name text when they occur inside an invoke name (longest first):
# vLLM's lexer takes them whole, so the `>` inside their NS does not end the name.
_NAME_LITERALS = tuple(
    sorted(
        (TOOL_CALL_START, TOOL_CALL_END, INVOKE_PREFIX + '"', INVOKE_PREFIX + "'",
         INVOKE_PREFIX, INVOKE_END),
        key=len,
        reverse=True,
    )
)  # fmt: skip
_TOOL_CHOICES = ("auto", "none", "required")
_NAME_IN_BODY = re.compile(r'"name"\s*:\s*"([^"]*)"')


class CallIds:
    """Tool-call ids `call_<8 hex>`: a 32-bit base (random, or from `seed`) plus a counter.

    With a seed the ids are deterministic (replays, tests); without, two parsers practically
    never hand out the same id, so ids stay unique across the turns of a conversation.
    """

    def __init__(self, seed: int | None = None):
        self._base = secrets.randbits(32) if seed is None else random.Random(seed).getrandbits(32)
        self._n = 0

    def next(self) -> str:
        out = f"call_{(self._base + self._n) % (1 << 32):08x}"
        self._n += 1
        return out


def tool_schemas(tools: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Function name -> its `parameters` schema, from OpenAI tool objects (or bare functions)."""
    out: dict[str, Any] = {}
    for tool in tools:
        if not isinstance(tool, dict):
            raise ValueError(f"a tool must be a JSON object, not {type(tool).__name__}")
        fn = tool.get("function", tool)
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError("a tool has no function name (expected {'function': {'name': ...}})")
        out.setdefault(fn["name"], fn.get("parameters"))
    return out


def check_tool_choice(tool_choice: Any) -> str | None:
    """None/"auto" -> "auto"-like parsing; "none"; "required"; a named tool -> "named"."""
    if tool_choice is None:
        return None
    if isinstance(tool_choice, str) and tool_choice in _TOOL_CHOICES:
        return tool_choice
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return "named"
    raise ValueError(
        "tool_choice must be auto, none, required or {'type': 'function', 'function': "
        f"{{'name': ...}}}}, not {tool_choice!r}"
    )


class _State(Enum):
    PASS = 0  # no tool parsing: everything is content
    CONTENT = 1  # before NS<tool_call>
    REGION = 2  # inside the tool region, looking for NS<invoke name=
    NAME = 3  # inside an invoke name, looking for the '>' that ends it
    BODY = 4  # inside an invoke body, looking for NS</invoke>


Delta = ContentDelta | ToolCallDelta


def _json_body_call(body: str) -> tuple[str, dict[str, Any]] | None:
    """A blank-named invoke whose body is JSON `{"name": .., "arguments"|"parameters": ..}`
    still makes a call in vLLM (`ParserEngine._extract_name_and_args`)."""
    try:
        obj = json.loads(body.strip())
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    for key in ("arguments", "parameters"):
        if key in obj:
            args = obj[key]
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except (ValueError, RecursionError):
                    return None
            break
    else:
        args = {k: v for k, v in obj.items() if k != "name"}
    if not isinstance(name, str) or not name or not isinstance(args, dict):
        return None
    return name, args


class ToolCallParser:
    """One instance per generation. `tools`/`tool_choice` as in the OpenAI request."""

    def __init__(
        self,
        tools: Sequence[dict[str, Any]] = (),
        ids: CallIds | None = None,
        *,
        tool_choice: str | dict[str, Any] | None = None,
    ):
        self._schemas = tool_schemas(tools)
        choice = check_tool_choice(tool_choice)
        self._forced = choice in ("required", "named")
        self._ids = ids or CallIds()
        self._state = _State.PASS if not self._schemas or choice == "none" else _State.CONTENT
        self._buf = ""
        self._ws_hold = ""  # whitespace-only content so far: dropped if a call follows
        self._content_started = False
        self._raw: list[str] | None = None  # the tool region's text while it has no call
        self._name = ""
        self._scan = 0  # NAME: where the name scan resumes in _buf
        self._parts: list[str] = []  # BODY: the body so far (parts, to stay linear)
        self._tail = ""  # BODY: the last len(INVOKE_END)-1 characters, for a split marker
        self.num_calls = 0

    @property
    def in_tool_block(self) -> bool:
        return self._state not in (_State.PASS, _State.CONTENT)

    def feed(self, text: str) -> list[Delta]:
        if not text:
            return []
        if self._state is _State.PASS:
            return [ContentDelta(text)]
        if self._raw is not None:
            self._raw.append(text)
        self._buf += text
        return self._drain(final=False)

    def finish(self) -> list[Delta]:
        if self._state is _State.PASS:
            return []
        out = self._drain(final=True)
        if self._state is _State.NAME:
            self._name, self._buf = self._buf, ""
            self._state = _State.BODY
        if self._state is _State.BODY:
            body = "".join(self._parts)
            self._parts, self._tail = [], ""
            self._emit_call(body, out)
        self._state = _State.REGION if self._state is not _State.CONTENT else _State.CONTENT
        self._buf = ""
        if self.num_calls == 0:
            raw = "".join(self._raw or ())
            pending = self._ws_hold + raw
            if self._forced and not self._content_started and not raw.strip():
                pending = ""  # vLLM: no call and whitespace-only content -> None
            if pending:
                out.append(ContentDelta(pending))
            self._ws_hold, self._raw = "", None
        return out

    # ---- internals --------------------------------------------------------------------------

    def _content(self, s: str, out: list[Delta]) -> None:
        if not s:
            return
        if not self._content_started:
            if not s.strip():
                self._ws_hold += s
                return
            s, self._ws_hold, self._content_started = self._ws_hold + s, "", True
        out.append(ContentDelta(s))

    def _emit_call(self, body: str, out: list[Delta]) -> None:
        raw_name, self._name = self._name, ""
        if not raw_name:  # vLLM's _try_extract_name: a `"name": "x"` in the body names it
            m = _NAME_IN_BODY.search(body)
            raw_name = m.group(1) if m else ""
        name = raw_name.strip()
        if not name:  # vLLM's _extract_name_and_args: a JSON body {"name":.., "arguments":..}
            found = _json_body_call(body) if raw_name and body.strip() else None
            if found is None:
                return
            name, args = found
        elif '"' in name or "'" in name:
            return  # an attribute-like header such as name="a" x="y": malformed
        else:
            props = properties_of(self._schemas.get(name))
            args = convert_arguments(parse_invoke_body(body), props) if body.strip() else {}
        args = refine_arguments(args, properties_of(self._schemas.get(name)))
        out.append(ToolCallDelta(self.num_calls, ToolCall(self._ids.next(), name, args)))
        self.num_calls += 1
        self._ws_hold, self._raw = "", None

    def _body_end(self) -> str | None:
        """Move _buf into the body; the whole body once `NS</invoke>` arrived (the text after
        it stays in _buf), else None. Only the short tail is searched again: linear time."""
        text, self._buf = self._buf, ""
        probe = self._tail + text
        i = probe.find(INVOKE_END)
        if i < 0:
            self._parts.append(text)
            self._tail = probe[1 - len(INVOKE_END) :]
            return None
        joined = "".join(self._parts) + text
        start = len(joined) - len(probe) + i
        self._parts, self._tail = [], ""
        self._buf = joined[start + len(INVOKE_END) :]
        return joined[:start]

    def _name_end(self, final: bool) -> tuple[int, int] | None:
        """(end of the name, start of the body) in _buf, or None while undecided."""
        s, p, n = self._buf, self._scan, len(self._buf)
        while p < n:
            c = s[p]
            if c == "]":
                lit = next((m for m in _NAME_LITERALS if s.startswith(m, p)), None)
                if lit is not None:
                    p += len(lit)
                    continue
                if not final and any(
                    n - p < len(m) and m.startswith(s[p:]) for m in _NAME_LITERALS
                ):
                    break  # wait: this could still become a marker
            elif c in "\"'":
                if p + 1 == n and not final:
                    break
                if s[p + 1 : p + 2] == ">":
                    return p, p + 2
            elif c == ">":
                return p, p + 1
            p += 1
        self._scan = p
        return None

    def _drain(self, final: bool) -> list[Delta]:
        out: list[Delta] = []
        while True:
            st = self._state
            if st is _State.CONTENT:
                i = self._buf.find(TOOL_CALL_START)
                if i >= 0:
                    self._content(self._buf[:i], out)
                    self._raw = [self._buf[i:]]
                    self._buf = self._buf[i + len(TOOL_CALL_START) :]
                    self._state = _State.REGION
                    continue
                k = 0 if final else held_suffix_len(self._buf, (TOOL_CALL_START,))
                self._content(self._buf[: len(self._buf) - k], out)
                self._buf = self._buf[len(self._buf) - k :]
                return out
            if st is _State.REGION:
                i = self._buf.find(INVOKE_PREFIX)
                if i < 0:
                    k = 0 if final else held_suffix_len(self._buf, (INVOKE_PREFIX,))
                    self._buf = self._buf[len(self._buf) - k :]
                    return out
                j = i + len(INVOKE_PREFIX)
                if j == len(self._buf) and not final:
                    self._buf = self._buf[i:]  # a quote may follow
                    return out
                if self._buf[j : j + 1] in ('"', "'"):
                    j += 1
                self._buf, self._scan, self._state = self._buf[j:], 0, _State.NAME
                continue
            if st is _State.NAME:
                found = self._name_end(final)
                if found is None:
                    return out
                self._name, self._buf = self._buf[: found[0]], self._buf[found[1] :]
                self._state, self._parts, self._tail = _State.BODY, [], ""
                continue
            # BODY
            if not self._buf:
                return out
            body = self._body_end()
            if body is None:
                return out
            self._emit_call(body, out)
            self._state = _State.REGION
