"""Incremental split of M3 output text into reasoning and content (SPEC §4.6).

* "enabled": the prompt opened the think block, so the text starts as reasoning up to the
  first `</mm:think>`; unclosed means everything is reasoning (reasoning is never None).
* otherwise: text before `<mm:think>` and after the first following `</mm:think>` is content;
  one stray `</mm:think>` at the very start is dropped; a closer elsewhere stays content; an
  unclosed `<mm:think>` makes the rest reasoning.

The markers are never emitted, partial markers are held back until the next chunk decides
them and flushed (not lost) at `finish()`. A `<mm:think>` inside reasoning is dropped as a
marker. Once `lock()` is called (the tool parser has entered a tool block), later think markers
are plain content: tool arguments may legitimately contain them.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum

from m3agent.engine.m3.tokens import THINK_END, THINK_START, check_thinking_mode, held_suffix_len


class _State(Enum):
    START = 0  # not "enabled": deciding whether the text opens with a stray closer
    CONTENT_PRE = 1  # content; a <mm:think> opens the think block
    REASONING = 2
    PASS = 3  # content, and no more markers are recognised


Segment = tuple[str, str]  # ("reasoning" | "content", text)


class ReasoningParser:
    def __init__(self, thinking_mode: str):
        check_thinking_mode(thinking_mode)
        enabled = thinking_mode == "enabled"
        self._state = _State.REASONING if enabled else _State.START
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

    def _drain(self, final: bool) -> Iterator[Segment]:
        while True:
            st = self._state
            if st is _State.START:
                if (
                    not final
                    and len(self._buf) < len(THINK_END)
                    and THINK_END.startswith(self._buf)
                ):
                    return
                if self._buf.startswith(THINK_END):
                    self._take(len(THINK_END))
                self._state = _State.CONTENT_PRE
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
                i, j = self._buf.find(THINK_START), self._buf.find(THINK_END)
                if i >= 0 and (j < 0 or i < j):  # a nested opener: drop the marker only
                    if i:
                        yield ("reasoning", self._take(i))
                    self._take(len(THINK_START))
                    continue
                if j >= 0:
                    if j:
                        yield ("reasoning", self._take(j))
                    self._take(len(THINK_END))
                    self._state = _State.PASS
                    continue
                k = 0 if final else held_suffix_len(self._buf, (THINK_START, THINK_END))
                n = len(self._buf) - k
                if n:
                    yield ("reasoning", self._take(n))
                return
            else:
                if self._buf:
                    yield ("content", self._take(len(self._buf)))
                return
