"""Incremental M3 tool-call parser over the content text (SPEC §4.2–4.4 and the Addendum).

Text before `NS<tool_call>` is content. From there on the message is a tool block: every
`NS<invoke name=...>...NS</invoke>` becomes one call, everything else is dropped (text between
invokes, after `NS</tool_call>`, a later stray `NS<invoke` still starts a call, as in vLLM).
A call is emitted whole when its `NS</invoke>` arrives (M3 arguments are not prefix-stable),
or at `finish()` for a truncated invoke, with the parameters finished so far.

Results do not depend on how the text is chunked: partial markers are held back, and an
invoke body is parsed as a whole string once its end can be decided. Each invoke is typed with
its *own* tool's schema (vLLM's non-streaming path can mix them up, see the Addendum).
"""

from __future__ import annotations

import random
import re
import secrets
from collections.abc import Sequence
from enum import Enum
from typing import Any

from m3agent.engine.api import ContentDelta, ToolCall, ToolCallDelta
from m3agent.engine.m3.tokens import (
    INVOKE_END,
    INVOKE_START,
    NS,
    TOOL_CALL_START,
    held_suffix_len,
)
from m3agent.engine.m3.xml_args import (
    Element,
    Status,
    convert_arguments,
    parse_invoke_body,
)

# `name="x"`, `name='x'` or `name=x`, and nothing else (`name="a" x="y"` is malformed).
_HEADER_RE = re.compile(r"""\s+name\s*=\s*(?:"([^"]+)"|'([^']+)'|([^\s"'=]+))\s*""")


_OPEN = NS + "<"


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


class _State(Enum):
    CONTENT = 0  # before NS<tool_call>
    BETWEEN = 1  # inside the tool block, looking for NS<invoke
    HEADER = 2  # after NS<invoke, waiting for the '>' that ends the header
    BODY = 3  # inside an invoke body
    SKIP = 4  # a malformed body: its arguments are fixed, waiting for NS</invoke>


Delta = ContentDelta | ToolCallDelta


class ToolCallParser:
    def __init__(self, tools: Sequence[dict[str, Any]] = (), ids: CallIds | None = None):
        self._schemas = tool_schemas(tools)
        self._ids = ids or CallIds()
        self._state = _State.CONTENT
        self._buf = ""
        self._ws_hold = ""  # whitespace-only content so far: dropped if a call follows
        self._content_started = False
        self._name = ""
        self._params: list[Element] = []
        # BODY: new text collects in _parts and is parsed only when it could end a tag
        self._parts: list[str] = []
        self._tail = ""
        self._needs_gt = False
        self.num_calls = 0

    @property
    def in_tool_block(self) -> bool:
        return self._state is not _State.CONTENT

    def feed(self, text: str) -> list[Delta]:
        if not text:
            return []
        if self._state is _State.BODY:
            probe = self._tail + text
            self._tail = probe[1 - len(_OPEN) :]
            self._parts.append(text)
            if (">" in text) if self._needs_gt else (_OPEN in probe):
                return self._drain(final=False)
            return []
        self._buf += text
        return self._drain(final=False)

    def finish(self) -> list[Delta]:
        out = self._drain(final=True)
        if self._state in (_State.BODY, _State.SKIP):
            if self._state is _State.BODY:
                self._params = parse_invoke_body(self._body()).params
            out.append(self._emit_call())
        self._buf = ""
        self._state = _State.BETWEEN if self._state is not _State.CONTENT else _State.CONTENT
        if self.num_calls == 0 and self._ws_hold:
            out.append(ContentDelta(self._ws_hold))
            self._ws_hold = ""
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

    def _body(self) -> str:
        if self._parts:
            self._buf += "".join(self._parts)
            self._parts = []
        return self._buf

    def _emit_call(self) -> ToolCallDelta:
        args = convert_arguments(self._params, self._schemas.get(self._name))
        delta = ToolCallDelta(self.num_calls, ToolCall(self._ids.next(), self._name, args))
        self.num_calls += 1
        self._ws_hold = ""
        self._params = []
        return delta

    def _drain(self, final: bool) -> list[Delta]:
        out: list[Delta] = []
        while True:
            st = self._state
            if st is _State.CONTENT:
                i = self._buf.find(TOOL_CALL_START)
                if i >= 0:
                    self._content(self._buf[:i], out)
                    self._buf = self._buf[i + len(TOOL_CALL_START) :]
                    self._state = _State.BETWEEN
                    continue
                k = 0 if final else held_suffix_len(self._buf, (TOOL_CALL_START,))
                self._content(self._buf[: len(self._buf) - k], out)
                self._buf = self._buf[len(self._buf) - k :]
                return out
            if st is _State.BETWEEN:
                i = self._buf.find(INVOKE_START)
                if i >= 0:
                    self._buf = self._buf[i + len(INVOKE_START) :]
                    self._state = _State.HEADER
                    continue
                k = 0 if final else held_suffix_len(self._buf, (INVOKE_START,))
                self._buf = self._buf[len(self._buf) - k :]
                return out
            if st is _State.HEADER:
                if self._buf and not self._buf[0].isspace():  # e.g. NS<invoked: not an invoke
                    self._state = _State.BETWEEN
                    continue
                gt = self._buf.find(">")
                if gt < 0:
                    if final:
                        self._buf, self._state = "", _State.BETWEEN
                    return out
                m = _HEADER_RE.fullmatch(self._buf[:gt])
                self._buf = self._buf[gt + 1 :]
                if m is None:  # malformed header: the whole invoke is skipped
                    self._state = _State.BETWEEN
                    continue
                self._name = m.group(1) or m.group(2) or m.group(3)
                self._state, self._parts = _State.BODY, []
                self._tail = self._buf[1 - len(_OPEN) :]
                continue
            if st is _State.BODY:
                res = parse_invoke_body(self._body())
                if res.status is Status.INCOMPLETE:
                    self._needs_gt = res.needs_gt
                    return out
                self._params = res.params
                self._buf = self._buf[res.end :]
                if res.status is Status.COMPLETE:
                    out.append(self._emit_call())
                    self._state = _State.BETWEEN
                else:
                    self._state = _State.SKIP
                continue
            # SKIP: the call's arguments are fixed; it ends at the next NS</invoke>.
            i = self._buf.find(INVOKE_END)
            if i < 0:
                self._buf = self._buf[1 - len(INVOKE_END) :]
                return out
            self._buf = self._buf[i + len(INVOKE_END) :]
            out.append(self._emit_call())
            self._state = _State.BETWEEN
