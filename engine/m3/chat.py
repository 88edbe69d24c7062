"""The chat layer every token-level backend shares: request -> prompt ids, text -> deltas.

native, vllm and scripted produce tokens and text; everything M3-specific above that lives
here once: rendering the request through the chat template (the turn's thinking mode in the
generation prefix, the session's mode in the system block), encoding it run by run (marker
strings inside messages stay text), parsing the output into reasoning / content / tool calls,
mapping the backend's finish reason, building the usage, and counting the engine's stats.

    layer = ChatLayer(tokenizer, template)
    prompt = layer.render(request)               # EngineRequestError on a bad request
    turn = layer.start(request, prompt)
    for text in backend_output: yield from turn.feed(text)
    yield from turn.finish("stop", prompt_tokens=..., cached_tokens=..., generated_tokens=...)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..api import (
    ChatDelta,
    ChatRequest,
    ContentDelta,
    EngineError,
    EngineRequestError,
    EngineStats,
    FinishReason,
    PromptTooLong,
    ToolCallDelta,
    Usage,
    UsageDelta,
)
from .chat_template import ChatTemplate, PromptPart
from .neutralise import encode_outside
from .output_parser import M3OutputParser
from .tokens import ALL_ADDED_TOKENS, SPECIAL_TOKENS, held_suffix_len

# What the backends report (vLLM's FinishReason strings; native uses the same words).
# "error" is vLLM's retryable request-level failure (it always answers 500 for it): raised.
# "repetition" is vLLM's loop detector: passed on, the agent should know the model looped.
BACKEND_FINISH_REASONS = tuple(r for r in FinishReason if r is not FinishReason.TOOL_CALLS)


@dataclass(frozen=True, slots=True)
class Prompt:
    """A rendered request: the text, its template/text runs, and the token ids."""

    text: str
    parts: tuple[PromptPart, ...]
    token_ids: tuple[int, ...]


def finish_reason(backend_reason: str | None, saw_tool_call: bool) -> FinishReason:
    """The backend's reason -> the ChatDelta vocabulary ("tool_calls" when a call ended it)."""
    reason = backend_reason or "stop"
    if reason not in BACKEND_FINISH_REASONS:
        raise EngineError(f"the engine finished with an unknown reason {reason!r}")
    if reason == "stop" and saw_tool_call:
        return FinishReason.TOOL_CALLS
    return FinishReason(reason)


class StatsCounter:
    """EngineStats accumulated from finished requests; thread-safe (native counts on its
    engine thread's behalf, servers read from another)."""

    def __init__(self) -> None:
        self._stats = EngineStats()
        self._lock = threading.Lock()

    def add(self, usage: Usage) -> None:
        with self._lock:
            self._stats = self._stats.plus(usage)

    def get(self) -> EngineStats:
        with self._lock:
            return self._stats


def render_parts(template: ChatTemplate, request: ChatRequest) -> list[PromptPart]:
    """The request's prompt runs: the turn's mode in the generation prefix, the session's
    mode (fixed for the session) in the system block, so a toggle never touches earlier
    tokens. ValueError from the template passes on."""
    return template.render_parts(
        list(request.messages),
        list(request.tools),
        request.thinking_mode,
        session_thinking_mode=request.session_thinking_mode,
    )


class ChatLayer:
    """One per engine. `tokenizer` needs encode_parts (M3Tokenizer) or encode."""

    def __init__(
        self,
        tokenizer: Any,
        template: ChatTemplate | None = None,
        *,
        max_model_len: int | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.template = template or ChatTemplate()
        self.max_model_len = max_model_len
        self.stats = StatsCounter()

    def render(self, request: ChatRequest) -> Prompt:
        """The prompt of `request`; EngineRequestError when it cannot be rendered, PromptTooLong
        when its text tokens alone leave no room (media expansion is checked by the backend)."""
        try:
            parts = tuple(render_parts(self.template, request))
        except ValueError as e:  # a bad thinking mode, a template that fails on these messages
            raise EngineRequestError(f"cannot render the prompt: {e}") from None
        ids = self.encode(parts)
        if self.max_model_len is not None:
            check_prompt_len(len(ids), self.max_model_len)
        return Prompt("".join(p.text for p in parts), parts, tuple(ids))

    def encode(self, parts: Sequence[PromptPart]) -> list[int]:
        # Run by run: markup typed inside a message or a tool result stays text instead of
        # becoming a control token, and a prompt that extends the last one extends its ids.
        encode_parts = getattr(self.tokenizer, "encode_parts", None)
        if encode_parts is not None:
            return list(encode_parts(parts))
        # A tokenizer that cannot keep added tokens as text (a GGUF vocabulary through
        # transformers, a plain tokenizers file): outside text is cut inside each marker and
        # its pieces encoded apart, so no piece can become a marker's token.
        ids: list[int] = []
        for p in parts:
            if p.kind == "template":
                ids += self.tokenizer.encode(p.text)
            else:
                markers = ALL_ADDED_TOKENS if p.kind == "text" else SPECIAL_TOKENS
                ids += encode_outside(self.tokenizer.encode, p.text, markers)
        return ids

    def count_text(self, text: str) -> int:
        """Tokens of generated text (for backends that only have the text)."""
        if not text:
            return 0
        encode = getattr(self.tokenizer, "encode_model", None) or self.tokenizer.encode
        return len(encode(text))

    def start(self, request: ChatRequest, prompt: Prompt | None = None) -> Turn:
        return Turn(self, request, len(prompt.token_ids) if prompt else 0)

    def start_raw(self, prompt_tokens: int) -> Turn:
        """A turn whose text is passed through unparsed (a /v1/completions request)."""
        return Turn(self, None, prompt_tokens)

    def encode_prompt_text(self, text: str) -> list[int]:
        """A client's text prompt, tokenized whole (marker strings become their tokens)."""
        return list(self.tokenizer.encode(text))


def check_prompt_len(prompt_len: int, max_model_len: int) -> None:
    """vLLM's rule: the prompt plus at least one generated token must fit."""
    if prompt_len >= max_model_len:
        raise PromptTooLong(prompt_len, max_model_len)


class Turn:
    """One generation: feed the backend's new text, then finish once with its counts."""

    def __init__(self, layer: ChatLayer, request: ChatRequest | None, prompt_tokens: int) -> None:
        self._layer = layer
        # None: raw text (a completion); else M3's parsers for this request's tools and mode.
        self._parser = (
            None
            if request is None
            else M3OutputParser(
                list(request.tools), request.thinking_mode, tool_choice=request.tool_choice
            )
        )
        self._started = time.monotonic()
        self._first_at: float | None = None
        self._raw: list[str] = []
        self._held = ""  # a possible start of a special token, not yet given to the parser
        self._prompt_tokens = prompt_tokens
        self.saw_tool_call = False
        self.finished = False

    @property
    def raw_text(self) -> str:
        return "".join(self._raw)

    def feed(self, text: str) -> list[ChatDelta]:
        if not text:
            return []
        if self._first_at is None:
            self._first_at = time.monotonic() - self._started
        self._raw.append(text)
        if self._parser is None:
            return [ContentDelta(text)]
        return self._seen(self._parser.feed(self._without_specials(text)))

    def _without_specials(self, text: str, *, final: bool = False) -> str:
        """Text minus M3's special tokens (role, end-of-turn, media markers): they are never
        content or reasoning. A tail that could still grow into one waits for the next text."""
        buf = self._held + text
        for token in SPECIAL_TOKENS:
            buf = buf.replace(token, "")
        keep = 0 if final else held_suffix_len(buf, SPECIAL_TOKENS)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep] if keep else buf

    def _seen(self, deltas: list[ChatDelta]) -> list[ChatDelta]:
        self.saw_tool_call = self.saw_tool_call or any(isinstance(d, ToolCallDelta) for d in deltas)
        return deltas

    def finish(
        self,
        backend_reason: str | None,
        *,
        prompt_tokens: int | None = None,
        cached_tokens: int = 0,
        generated_tokens: int | None = None,
        time_to_first_token_s: float | None = None,
        error: str | None = None,
        restored_tokens: int = 0,
        host_tokens: int = 0,
    ) -> list[ChatDelta]:
        """The parser's tail and the one UsageDelta; counts the request in the engine's stats.
        A backend "error" raises EngineError after the stats are counted."""
        if self.finished:
            return []
        self.finished = True
        deltas: list[ChatDelta] = []
        if self._parser is not None:
            tail = self._without_specials("", final=True)
            deltas = self._seen((self._parser.feed(tail) if tail else []) + self._parser.finish())
        prompt = self._prompt_tokens if prompt_tokens is None else prompt_tokens
        generated = (
            self._layer.count_text(self.raw_text) if generated_tokens is None else generated_tokens
        )
        total = time.monotonic() - self._started
        first = self._first_at if time_to_first_token_s is None else time_to_first_token_s
        if first is None and generated:
            # Tokens came, but none decoded to text (a backend that times only text, a model
            # that said only special tokens): the first was in hand by the end at the latest.
            first = total
        usage = Usage(
            prompt_tokens=prompt,
            cached_prompt_tokens=cached_tokens,
            generated_tokens=generated,
            time_to_first_token_s=first,
            total_time_s=total,
            restored_prompt_tokens=restored_tokens,
            host_prompt_tokens=host_tokens,
        )
        self._layer.stats.add(usage)
        if backend_reason == "error":
            raise EngineError(error or "the engine failed this request (retry it)")
        reason = finish_reason(backend_reason, self.saw_tool_call)
        deltas.append(UsageDelta(usage, reason, raw_text=self.raw_text))
        return deltas
