"""The Engine protocol: a chat request in, a stream of structured deltas out.

Every backend (native, vllm, remote, scripted) implements `Engine`; the agent sees only these
types. Frozen dataclasses cross the package boundary; pydantic stays where JSON meets the outside.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

# ---- closed vocabularies ------------------------------------------------------------------
# Each is defined once, here. A member equals its string value and json.dumps writes that
# string, so logs, session files and the wire read as before; a string read back from JSON
# goes through the enum (`ThinkingMode(value)`) where it enters a typed field.


class ThinkingMode(StrEnum):
    """How the model thinks in a turn: always, never, or when the model decides.

    A session names a mode in three places, each for its own job: `thinking_default` (the
    agent's config and Session: the mode of a turn that names none; settings `thinking`,
    `--thinking`, ctrl+t), `ChatRequest.thinking_mode` (this turn's, rendered in the generation
    prefix only) and `ChatRequest.session_thinking_mode` (the one written into the system
    block: fixed for the session, so switching per turn never rewrites cached tokens)."""

    ENABLED = "enabled"
    DISABLED = "disabled"
    ADAPTIVE = "adaptive"


# For `value in THINKING_MODES` on a plain string (Python 3.11's `in` on an Enum raises for a
# str) and for messages that list the choices.
THINKING_MODES: tuple[ThinkingMode, ...] = tuple(ThinkingMode)


class FinishReason(StrEnum):
    """Why one generation ended (the last ChatDelta, UsageDelta, says)."""

    STOP = "stop"  # the model ended its answer
    LENGTH = "length"  # max_tokens (or the context) was reached
    TOOL_CALLS = "tool_calls"  # the model stopped to call tools
    ABORT = "abort"  # the request was aborted (an interrupt)
    REPETITION = "repetition"  # vLLM's loop detector stopped it
    ERROR = "error"  # the backend failed the request


class EngineName(StrEnum):
    """The backends: `--engine` and EngineInfo.backend."""

    NATIVE = "native"
    VLLM = "vllm"
    REMOTE = "remote"
    SCRIPTED = "scripted"


ENGINE_NAMES: tuple[EngineName, ...] = tuple(EngineName)
# The backends that load the weights on this machine (the others reach a server or a script).
LOCAL_ENGINES: tuple[EngineName, ...] = (EngineName.NATIVE, EngineName.VLLM)

# "developer" and "root" are M3's own first-message roles (only `messages[0]`, or the one after a
# `root`, is rendered as such: see engine/m3/chat_template.py).
Role = Literal["root", "system", "developer", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call the model asked for. `arguments` is already typed by the tool's JSON schema."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class MediaPart:
    """An image or video attached to a message (a path on disk, preprocessed later).

    `offset` is where its placeholder sits in the message's `content` (a character index; 0:
    before the text), so content parts keep their order: [text "a", image, text "b"] is
    content "ab" with the image at offset 1. A message's media are in non-decreasing offset
    order (the order of their placeholders in the prompt).
    """

    kind: Literal["image", "video"]
    path: str
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str = ""
    reasoning: str | None = None  # assistant only: the text inside <mm:think>...</mm:think>
    tool_calls: tuple[ToolCall, ...] = ()  # assistant only
    tool_call_id: str | None = None  # tool only
    name: str | None = None  # tool only: the tool's name
    media: tuple[MediaPart, ...] = ()  # images/videos in the content (agent: user messages)
    thinking_mode: ThinkingMode | None = None  # assistant only: the mode its turn ran under
    # assistant only: the model's exact output text. Renderers emit it verbatim in history so
    # that the next prompt extends the last one token for token (prefix caching).
    raw_text: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.reasoning is not None:
            d["reasoning"] = self.reasoning
        if self.tool_calls:
            d["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            d["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            d["name"] = self.name
        if self.media:
            d["media"] = [
                {"kind": m.kind, "path": m.path, **({"offset": m.offset} if m.offset else {})}
                for m in self.media
            ]
        if self.thinking_mode is not None:
            d["thinking_mode"] = self.thinking_mode
        if self.raw_text is not None:
            d["raw_text"] = self.raw_text
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Message:
        return cls(
            role=d["role"],
            content=d.get("content") or "",
            reasoning=d.get("reasoning"),
            tool_calls=tuple(
                ToolCall(c["id"], c["name"], dict(c["arguments"])) for c in d.get("tool_calls", ())
            ),
            tool_call_id=d.get("tool_call_id"),
            name=d.get("name"),
            media=tuple(
                MediaPart(m["kind"], m["path"], int(m.get("offset", 0))) for m in d.get("media", ())
            ),
            thinking_mode=ThinkingMode(d["thinking_mode"]) if d.get("thinking_mode") else None,
            raw_text=d.get("raw_text"),
        )


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """One request's sampling, for every backend and the native engine's token level.

    The defaults are M3's recommended chat sampling; the native engine's own default, when a
    caller gives none, is greedy (engine/native/core/sampling_params.py). Nothing is checked on
    construction: the backend that runs a request checks it against its own rules and answers
    a one-line EngineRequestError. temperature 0 means greedy; top_k 0 or -1 and top_p 1.0
    switch those filters off.
    """

    max_tokens: int = 8192
    temperature: float = 1.0
    top_p: float = 0.95
    top_k: int = 40
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1


@dataclass(frozen=True, slots=True)
class ChatRequest:
    request_id: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI tool objects: {"type": "function", ...}
    # this turn's mode: the generation prefix only
    thinking_mode: ThinkingMode = ThinkingMode.ADAPTIVE
    sampling: SamplingParams = field(default_factory=SamplingParams)
    # The mode written in the prompt's first (system) block. Fixed for a session (its starting
    # default), so a per-turn `thinking_mode` change never rewrites earlier tokens.
    session_thinking_mode: ThinkingMode = ThinkingMode.ADAPTIVE
    # OpenAI's tool_choice: None/"auto" parse calls, "none" keeps the markup as content
    # (vLLM's behaviour; engine/m3/tool_parser.py).
    tool_choice: str | dict[str, Any] | None = None


# ---- deltas -------------------------------------------------------------------------------
# A piece of streamed reasoning or answer text. The agent passes these two on to the front ends
# as its events of the same name (agent/events.py): one thing, one type, so each carries its
# stream-json tag and form (docs/cli.md) here.


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    type: ClassVar[str] = "reasoning_delta"
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "text": self.text}


@dataclass(frozen=True, slots=True)
class ContentDelta:
    type: ClassVar[str] = "content_delta"
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "text": self.text}


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A complete tool call (M3 arguments are not prefix-stable, so they arrive whole)."""

    index: int
    call: ToolCall


@dataclass(frozen=True, slots=True)
class TokenCounts:
    """Prompt tokens (cached_prompt_tokens of them came from the prefix cache) and generated
    tokens: of one engine call (Usage), or summed over many (EngineStats)."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0

    @property
    def recomputed_prompt_tokens(self) -> int:
        return self.prompt_tokens - self.cached_prompt_tokens


@dataclass(frozen=True, slots=True)
class Usage(TokenCounts):
    """One engine call's token counts and timings."""

    time_to_first_token_s: float | None = None
    total_time_s: float | None = None
    cache_miss_reason: str | None = None  # e.g. "engine restarted", "snapshot refreshed"
    # Of cached_prompt_tokens, those whose pages were read back from the disk (the native
    # engine's disk tier, docs/kv-cache.md) rather than found in the engine's memory.
    restored_prompt_tokens: int = 0
    # Of cached_prompt_tokens, those whose K/V pages the native engine's host-memory tier
    # kept in host memory (fetched to the GPU block by block); none of the restored ones.
    host_prompt_tokens: int = 0

    def prefix_sources(self) -> list[tuple[int, str]]:
        """Where the cached prompt tokens came from, for a status line: (tokens, "from host
        memory"), (tokens, "from disk"), those of the native engine's tiers that served any."""
        pairs = ((self.host_prompt_tokens, "host memory"), (self.restored_prompt_tokens, "disk"))
        return [(n, f"from {where}") for n, where in pairs if n]

    def then(self, later: Usage) -> Usage:
        """This usage followed by `later`'s, as one (a turn's engine calls): tokens and time
        summed, the first time to first token and the first cache-miss reason kept."""
        first_token = self.time_to_first_token_s
        total = (self.total_time_s or 0.0) + (later.total_time_s or 0.0)
        return Usage(
            prompt_tokens=self.prompt_tokens + later.prompt_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens + later.cached_prompt_tokens,
            generated_tokens=self.generated_tokens + later.generated_tokens,
            time_to_first_token_s=later.time_to_first_token_s
            if first_token is None
            else first_token,
            total_time_s=total or None,
            cache_miss_reason=self.cache_miss_reason or later.cache_miss_reason,
            restored_prompt_tokens=self.restored_prompt_tokens + later.restored_prompt_tokens,
            host_prompt_tokens=self.host_prompt_tokens + later.host_prompt_tokens,
        )


@dataclass(frozen=True, slots=True)
class UsageDelta:
    usage: Usage
    finish_reason: FinishReason = FinishReason.STOP
    # The model's exact generated text, when the backend has it (native, vllm, scripted); the
    # agent stores it as Message.raw_text so the next prompt re-renders it verbatim.
    raw_text: str | None = None


@dataclass(frozen=True, slots=True)
class PrefillProgress:
    """How far the prompt's prefill has got, after each chunk of it. Only a backend that sees
    its chunks reports this (native); others (remote, vllm, scripted) may send none. It comes
    before the first text and is never the last delta."""

    prompt_tokens: int
    computed_tokens: int  # of prompt_tokens, the cached ones included
    cached_tokens: int  # served from the prefix cache, not computed
    elapsed_s: float  # since the request was first scheduled

    @property
    def tokens_per_s(self) -> float | None:
        computed = self.computed_tokens - self.cached_tokens
        return computed / self.elapsed_s if self.elapsed_s > 0 and computed > 0 else None

    @property
    def eta_s(self) -> float | None:
        rate = self.tokens_per_s
        return (self.prompt_tokens - self.computed_tokens) / rate if rate else None


ChatDelta = ReasoningDelta | ContentDelta | ToolCallDelta | UsageDelta | PrefillProgress


@dataclass(frozen=True, slots=True)
class EngineInfo:
    backend: EngineName
    model: str
    max_context_tokens: int


@dataclass(frozen=True, slots=True)
class EngineStats(TokenCounts):
    """Totals over finished requests (an engine's since it started, a TUI session's for /cost)."""

    requests: int = 0

    def plus(self, usage: Usage) -> EngineStats:
        """These totals with one more finished request's usage."""
        return EngineStats(
            requests=self.requests + 1,
            prompt_tokens=self.prompt_tokens + usage.prompt_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens + usage.cached_prompt_tokens,
            generated_tokens=self.generated_tokens + usage.generated_tokens,
        )


# ---- errors -------------------------------------------------------------------------------


class EngineError(Exception):
    """Base of every engine failure; the message is one line a user can act on."""


class EngineUnavailable(EngineError):
    """The engine cannot be reached or loaded (refused connection, missing weights, no GPU)."""


class EngineRequestError(EngineError):
    """The engine rejected this request (4xx, prompt too long, bad media)."""


class EngineProtocolError(EngineError):
    """The engine answered with something malformed (a broken stream)."""


class PromptTooLong(EngineRequestError):
    def __init__(self, prompt_tokens: int, max_tokens: int):
        super().__init__(
            f"prompt is {prompt_tokens} tokens, more than the model's maximum of {max_tokens}"
        )
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens


@runtime_checkable
class Engine(Protocol):
    """What every backend provides. One instance serves many requests, concurrently."""

    def info(self) -> EngineInfo: ...

    def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        """Yields reasoning / content / tool-call deltas, then exactly one UsageDelta last
        (PrefillProgress deltas may come first, while the prompt is computed)."""
        ...

    async def abort(self, request_id: str) -> None: ...

    def stats(self) -> EngineStats: ...

    async def close(self) -> None: ...
