"""A prompt as runs of template markup and outside text (for `M3Tokenizer.encode_parts`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# "template": the renderer's markup, marker strings are tokens. "text": outside text (messages,
# tool results, schemas): every marker string stays plain text. "model": the model's own
# earlier output (raw text, rendered tool calls): its tool-call and think markers are tokens
# again, as it wrote them, but role / end-of-turn / media markers stay text.
Kind = Literal["template", "text", "model"]


@dataclass(frozen=True, slots=True)
class PromptPart:
    """A run of prompt text. "template": the renderer's own markup, marker strings in it are
    tokens. "text": content from outside (messages, tool results, schemas, model output):
    `M3Tokenizer.encode_parts` keeps every added-token string in it as plain text, so a file
    that contains `[e~[` or `]<]minimax[>[` cannot end a turn or open a tool call. "model":
    see Kind."""

    text: str
    kind: Kind


class PartsBuilder:
    """Appends runs; adjacent runs of one kind merge."""

    def __init__(self) -> None:
        self.parts: list[PromptPart] = []

    def add(self, kind: Kind, s: str, *, keep_empty: bool = False) -> None:
        # An empty "text" run is kept where asked (an assistant's raw output) so the template
        # run before it ends exactly where the generation prompt of the previous turn ended:
        # then encode_parts keeps the prefix token for token.
        if not s and not keep_empty:
            return
        last = self.parts[-1] if self.parts else None
        if last is not None and last.kind == kind and (s or kind == "template"):
            self.parts[-1] = PromptPart(last.text + s, kind)
        else:
            self.parts.append(PromptPart(s, kind))

    def t(self, s: str) -> None:
        self.add("template", s)

    def x(self, s: str, *, keep_empty: bool = False) -> None:
        self.add("text", s, keep_empty=keep_empty)

    def m(self, s: str, *, keep_empty: bool = False) -> None:
        self.add("model", s, keep_empty=keep_empty)

    def runs(self, runs: list[tuple[Kind, str]]) -> None:
        for kind, s in runs:
            self.add(kind, s)

    def text(self) -> str:
        return "".join(p.text for p in self.parts)
