"""Which parts of a checkpoint template's output are outside text (for encode_parts).

A jinja template gives one string, so marker strings inside a message (a repository snapshot
of M3 code holds `[e~[`) would become special tokens. We render a second time with every
message content and reasoning replaced by a numbered sentinel: where a sentinel lands in the
output, that message's text goes as a "text" run. An assistant content holding `</mm:think>`,
which M3's template splits into reasoning and content, is split first the same way
(m3_render.split_think), so its two halves can be marked too. When the marked rendering still
does not map back to the real one (a template that rewrites texts in other ways), the prompt
is one template run rendered from texts whose marker strings are neutralised
(engine/m3/neutralise.py): then, and only then, it differs from the template's own output.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..api import Message
from .m3_render import split_think
from .neutralise import neutralise
from .prompt_parts import PartsBuilder, PromptPart
from .tokens import ALL_ADDED_TOKENS, THINK_END

_OPEN, _CLOSE = "\U000f0000", "\U000f0001"  # supplementary private use: never in real text
_MARK = re.compile(f"{_OPEN}(\\d+){_CLOSE}")


def _has_marker(s: str | None) -> bool:
    return s is not None and any(m in s for m in ALL_ADDED_TOKENS)


def _clean(s: str | None) -> bool:
    return not s or (_OPEN not in s and _CLOSE not in s)


def _presplit(m: Message) -> Message:
    """An assistant content with a think block as the template would split it."""
    if m.role != "assistant" or m.reasoning is not None or not m.content or m.media:
        return m
    if THINK_END not in m.content or (halves := split_think([("text", m.content)])) is None:
        return m
    reasoning, content = ("".join(s for _, s in runs) for runs in halves)
    return replace(m, reasoning=reasoning, content=content)


def outside_text_runs(
    render: Callable[[Sequence[Message]], str], messages: Sequence[Message]
) -> list[PromptPart]:
    """`render(messages)` as template/text runs (one template run when they cannot be told)."""
    real = render(messages)

    def whole() -> list[PromptPart]:
        # One template run, so the texts' marker strings are neutralised first (else they
        # would be tokens): the model reads the same characters, never a control token.
        if not any(_has_marker(m.content) or _has_marker(m.reasoning) for m in messages):
            return [PromptPart(real, "template")]
        safe = [
            replace(
                m,
                content=neutralise(m.content) if m.content else m.content,
                reasoning=neutralise(m.reasoning) if m.reasoning else m.reasoning,
            )
            for m in messages
        ]
        return [PromptPart(render(safe), "template")]

    if not all(_clean(m.content) and _clean(m.reasoning) for m in messages):
        return whole()
    texts: list[str] = []

    def mark(s: str) -> str:
        texts.append(s)
        return f"{_OPEN}{len(texts) - 1}{_CLOSE}"

    marked = [
        replace(
            m,
            content=mark(m.content) if m.content and not m.media else m.content,
            reasoning=mark(m.reasoning) if m.reasoning else m.reasoning,
        )
        for m in map(_presplit, messages)
    ]
    try:
        probe = render(marked)
    except ValueError:
        return whole()
    out = PartsBuilder()
    pos = 0
    for match in _MARK.finditer(probe):
        out.t(probe[pos : match.start()])
        out.x(texts[int(match.group(1))])
        pos = match.end()
    out.t(probe[pos:])
    return out.parts if out.text() == real else whole()
