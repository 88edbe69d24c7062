"""Incremental split of M3 output text into reasoning and content (SPEC §4.6).

The results are vLLM 0.33.0's non-streaming ones
(`reasoning/minimax_m3_reasoning_parser.py::MiniMaxM3ReasoningParser.extract_reasoning`):

* not "enabled": a leading `</mm:think>` is dropped and the rest is content, markers and
  all; otherwise text before the first `<mm:think>` and after the first `</mm:think>` that
  follows it is content, the text between is reasoning (a second `<mm:think>` inside it is
  reasoning text); an unclosed `<mm:think>` makes the rest reasoning.
* "enabled": the prompt opened the think block, so the text is reasoning up to the first
  `</mm:think>` (a leading `<mm:think>` is dropped); unclosed, everything is reasoning
  (reasoning is never None).

The markers are never emitted, partial markers are held back until the next chunk decides
them and flushed (not lost) at `finish()`.

Two deliberate differences, both where vLLM's rule needs the whole text and could not be
streamed: (1) once `lock()` is called (the tool parser has entered a tool block), later think
markers are plain content, as tool arguments may contain them (vLLM splits the whole text
first and mangles such arguments); (2) in "enabled" mode a `<mm:think>` that is not leading
is text (vLLM then re-reads everything before it as content).
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum

from .tokens import THINK_END, THINK_START, check_thinking_mode, held_suffix_len


class _State(Enum):
    START = 0  # not "enabled": deciding whether the text opens with a stray closer
    START_ENABLED = 1  # "enabled": deciding whether the text repeats the opener
    CONTENT_PRE = 2  # content; a <mm:think> opens the think block
    REASONING = 3
    PASS = 4  # content, and no more markers are recognised


Segment = tuple[str, str]  # ("reasoning" | "content", text)


class ReasoningParser:
    def __init__(self, thinking_mode: str):
        check_thinking_mode(thinking_mode)
        enabled = thinking_mode == "enabled"
        self._state = _State.START_ENABLED if enabled else _State.START
        self.reasoning_seen = enabled  # a think block was opened (reasoning is "" not None)
        self._buf = ""
        self._locked = False

    def lock(self) -> None:
        self._locked = True

    def feed(self, text: str) -> Iterator[Segment]:
        """Segments to act on in order; a generator so that `lock()` takes effect mid-way."""
        self._buf += text
        yield from self._drain(final=False)

    def finish(self) -> Iterator[Segment]:
        yield from self._drain(final=True)

    def _take(self, n: int) -> str:
        s, self._buf = self._buf[:n], self._buf[n:]
        return s

    def _leading(self, marker: str, final: bool) -> bool | None:
        """Whether the text starts with `marker`; None while it cannot be told yet."""
        if not final and len(self._buf) < len(marker) and marker.startswith(self._buf):
            return None
        return self._buf.startswith(marker)

    def _drain(self, final: bool) -> Iterator[Segment]:
        while True:
            st = self._state
            if st is _State.START or st is _State.START_ENABLED:
                marker = THINK_END if st is _State.START else THINK_START
                lead = self._leading(marker, final)
                if lead is None:
                    return
                if lead:
                    self._take(len(marker))
                if st is _State.START_ENABLED:
                    self._state = _State.REASONING
                else:  # a stray leading closer: everything after it is content
                    self._state = _State.PASS if lead else _State.CONTENT_PRE
            elif st is _State.CONTENT_PRE:
                i = self._buf.find(THINK_START)
                n = (
                    i
                    if i >= 0
                    else len(self._buf)
                    - (0 if final else held_suffix_len(self._buf, (THINK_START,)))
                )
                if n:
                    yield ("content", self._take(n))
                if self._locked:
                    self._state = _State.PASS
                    continue
                if i < 0:
                    return
                self._take(len(THINK_START))
                self._state, self.reasoning_seen = _State.REASONING, True
            elif st is _State.REASONING:
                j = self._buf.find(THINK_END)
                if j >= 0:
                    if j:
                        yield ("reasoning", self._take(j))
                    self._take(len(THINK_END))
                    self._state = _State.PASS
                    continue
                k = 0 if final else held_suffix_len(self._buf, (THINK_END,))
                n = len(self._buf) - k
                if n:
                    yield ("reasoning", self._take(n))
                return
            else:
                if self._buf:
                    yield ("content", self._take(len(self._buf)))
                return
