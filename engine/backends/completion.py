"""A raw text completion: a prompt (token ids or text) in, the model's text out, unparsed.

What `/v1/completions` serves. Token-level backends (native, scripted, vllm) implement
`complete(CompletionRequest)` next to `stream(ChatRequest)`, and so are `CompletionEngine`s
(the capability is this declared protocol, which mypy checks each of them against, not a probe
for a method); the chat layer's Turn in raw mode
passes the text through as ContentDeltas and ends with the same UsageDelta. The remote
backend renders chat requests itself and sends them here, so the prompt it caches is the one
it rendered (a thinking toggle changes only the generation prefix).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..api import ChatDelta, Engine, SamplingParams

if TYPE_CHECKING:
    from ..m3.chat import ChatLayer


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    request_id: str
    prompt_token_ids: tuple[int, ...] | None = None  # exactly these tokens
    prompt_text: str | None = None  # tokenized whole, as vLLM does (markers become tokens)
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self) -> None:
        if (self.prompt_token_ids is None) == (self.prompt_text is None):
            raise ValueError("a completion needs a prompt: token ids or text, not both")
        if not (self.prompt_token_ids or self.prompt_text):  # every backend: no empty prompt
            raise ValueError("a completion needs a prompt: this one is empty")


def prompt_ids(request: CompletionRequest, chat: ChatLayer) -> list[int]:
    """The completion's prompt as token ids: its own, or its text tokenized whole."""
    if request.prompt_token_ids is not None:
        return list(request.prompt_token_ids)
    return chat.encode_prompt_text(request.prompt_text or "")


@runtime_checkable
class CompletionEngine(Engine, Protocol):
    """An engine that also serves raw completions (`m3agent serve`'s /v1/completions)."""

    def complete(self, request: CompletionRequest) -> AsyncIterator[ChatDelta]:
        """The prompt's continuation as ContentDeltas, unparsed, then one UsageDelta."""
        ...
