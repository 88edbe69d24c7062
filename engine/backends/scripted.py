"""ScriptedEngine: replays recorded raw M3 model text through the real m3 format layer.

Not a mock: each stream() renders the request's prompt with the real chat renderer, counts its
tokens with the real tokenizer (cached tokens = the longest common token prefix with the
previous prompt, rounded down to whole 128-token pages, as a prefix cache would reuse them),
and streams the next script entry in small chunks through the real M3OutputParser. Tests and
demos use it; `m3agent run --engine scripted --script FILE` takes a JSON array of strings.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..api import (
    ChatDelta,
    ChatRequest,
    EngineInfo,
    EngineName,
    EngineRequestError,
    EngineStats,
)
from ..json_file import read_json
from ..m3.chat import ChatLayer, Turn
from ..m3.chat_template import ChatTemplate
from .completion import CompletionEngine, CompletionRequest, prompt_ids

PAGE_TOKENS = 128


def load_script(path: str | Path) -> list[str]:
    """A JSON array of strings, one raw model output per engine call."""
    p = Path(path)
    try:
        data = read_json(p)
    except ValueError as e:
        raise ValueError(f"script: {e}") from None
    if not isinstance(data, list) or not all(isinstance(x, str) for x in data):
        raise ValueError(f"script {p} must be a JSON array of strings")
    return data


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class ScriptedEngine:
    def __init__(
        self,
        script: Sequence[str],
        tokenizer: Any = None,
        *,
        chunk_chars: int = 7,
        chunk_delay_s: float = 0.0,
        template: ChatTemplate | None = None,
        model: str = "scripted",
        max_context_tokens: int = 196_608,
    ):
        if chunk_chars < 1:
            raise ValueError(f"chunk_chars must be at least 1, got {chunk_chars}")
        self._script = list(script)
        self._next = 0
        self._tokenizer = tokenizer
        self._chunk_chars = chunk_chars
        self._chunk_delay_s = chunk_delay_s
        self._template = template
        self._model = model
        self._max_ctx = max_context_tokens
        self._aborted: set[str] = set()
        self._chat: ChatLayer | None = None
        # The prompt token ids of every request, in order: what a prefix cache would have seen.
        self.prompt_token_ids: list[list[int]] = []
        self.prompts: list[str] = []

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> ScriptedEngine:
        return cls(load_script(path), **kwargs)

    def _tok(self) -> Any:
        if self._tokenizer is None:
            from ..m3.tokenizer import M3Tokenizer

            self._tokenizer = M3Tokenizer.default()
        return self._tokenizer

    @property
    def remaining(self) -> int:
        return len(self._script) - self._next

    def info(self) -> EngineInfo:
        return EngineInfo(
            backend=EngineName.SCRIPTED, model=self._model, max_context_tokens=self._max_ctx
        )

    def stats(self) -> EngineStats:
        return self._layer().stats.get()

    def _layer(self) -> ChatLayer:
        if self._chat is None:  # the default tokenizer loads on first use, not at construction
            self._chat = ChatLayer(self._tok(), self._template)
        return self._chat

    async def abort(self, request_id: str) -> None:
        self._aborted.add(request_id)

    async def close(self) -> None:
        return None

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        text = self._next_reply()
        chat = self._layer()
        prompt = chat.render(request)
        self.prompts.append(prompt.text)
        async for d in self._play(
            request.request_id, list(prompt.token_ids), text, chat.start(request, prompt)
        ):
            yield d

    async def complete(self, request: CompletionRequest) -> AsyncIterator[ChatDelta]:
        """A raw completion: the next reply as text, unparsed (what /v1/completions serves)."""
        text = self._next_reply()
        chat = self._layer()
        ids = prompt_ids(request, chat)
        self.prompts.append(request.prompt_text or self._tok().decode(ids))
        async for d in self._play(request.request_id, ids, text, chat.start_raw(len(ids))):
            yield d

    def _next_reply(self) -> str:
        if self._next >= len(self._script):
            raise EngineRequestError(
                f"the script has no reply left for engine call {self._next + 1} "
                f"(it holds {len(self._script)})"
            )
        self._next += 1
        return self._script[self._next - 1]

    async def _play(
        self, request_id: str, ids: list[int], text: str, turn: Turn
    ) -> AsyncIterator[ChatDelta]:
        previous = self.prompt_token_ids[-1] if self.prompt_token_ids else []
        cached = common_prefix_len(previous, ids) // PAGE_TOKENS * PAGE_TOKENS
        if cached >= len(ids):  # the last token is always computed to get the next logits
            cached = max(0, (len(ids) - 1) // PAGE_TOKENS * PAGE_TOKENS)
        self.prompt_token_ids.append(ids)
        finish = "stop"
        for i in range(0, len(text), self._chunk_chars):
            if request_id in self._aborted:
                finish = "abort"
                break
            for d in turn.feed(text[i : i + self._chunk_chars]):
                yield d
            # A real yield point, so that interrupts and other requests interleave.
            await asyncio.sleep(self._chunk_delay_s)
        self._aborted.discard(request_id)
        # Generated tokens: the whole scripted reply (what the model "wrote"), even if aborted.
        generated = self._layer().count_text(text)
        for d in turn.finish(finish, cached_tokens=cached, generated_tokens=generated):
            yield d


if TYPE_CHECKING:  # mypy checks the declared capability: ScriptedEngine is a CompletionEngine

    def _serves_completions(engine: ScriptedEngine) -> CompletionEngine:
        return engine
