"""The OpenAI chat-completions wire format on the server side.

Requests are validated with pydantic (JSON meets the outside here) and turned into our
ChatRequest; engine deltas are turned back into response objects and stream chunks.
Images and videos arrive as data URLs (media.py turns them into files; `file://` only inside
an allow-listed directory). Every field is validated here, so that a malformed value is a 400
naming it rather than an exception deep in the renderer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Protocol

from m3agent.engine.api import (
    THINKING_MODES,
    ChatRequest,
    MediaPart,
    Message,
    SamplingParams,
    ThinkingMode,
    ToolCall,
    Usage,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import WireError
from .media import save_media_url

INT64 = 2**63  # seeds are 64-bit at every engine (torch, vLLM): larger ones are refused
# A tool's name goes into the prompt's markup: word characters, '.', ':', '-' only.
TOOL_NAME = r"^[A-Za-z0-9_.:\-]{1,128}$"


_MEDIA_TYPES = {"image_url": "image", "video_url": "video"}
# A token of text is rarely more than a few bytes; 32 bytes per token of context (JSON escapes
# included) is the most text a request may carry before it certainly cannot fit.
BYTES_PER_TOKEN = 32


def text_bytes(body: ChatBody) -> int:
    """The request's text (messages and tool schemas), in bytes: bounded by the context."""
    n = len(json.dumps(body.tools or [], ensure_ascii=False).encode())
    for m in body.messages:
        for piece in (_text_of(m.content), m.reasoning_content, m.reasoning, m.raw_text):
            n += len((piece or "").encode())
    return n


class _ToolFunction(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(pattern=TOOL_NAME)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    function: _ToolFunction


class _Url(BaseModel):
    model_config = ConfigDict(extra="allow")
    url: str


class _Part(BaseModel):
    """One content part: text, or an image/video as {"url": ...} (not a bare string)."""

    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None
    image_url: _Url | None = None
    video_url: _Url | None = None


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    arguments: str | dict[str, Any] = ""


class _ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str = ""
    type: str = "function"
    function: _Function


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    # m3agent's extension: the model's exact output, re-rendered verbatim so that the next
    # prompt extends the last one token for token (what the engine generated is cached too).
    raw_text: str | None = None
    # ... and the thinking mode its turn ran under (its generation prefix is re-rendered).
    thinking_mode: Literal["enabled", "disabled", "adaptive"] | None = None

    @field_validator("content")
    @classmethod
    def _parts(cls, value: Any) -> Any:
        # Validated as parts but kept as the client's dicts (extra keys and their order).
        if isinstance(value, list):
            for p in value:
                part = _Part.model_validate(p)
                if part.type == "text" and part.text is None:
                    raise ValueError("a text part needs a 'text' string")
                if part.type in _MEDIA_TYPES and getattr(part, part.type) is None:
                    raise ValueError(f'a {part.type} part needs {{"url": ...}}')
        return value


class ChatBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ""
    messages: list[_Message] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1, lt=2**31)
    seed: int | None = Field(default=None, ge=-INT64, lt=INT64)
    stop: str | list[str] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # Accepted so that an unsupported value is a clear 400, not silently ignored.
    n: int = 1
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None
    tool_choice: str | dict[str, Any] | None = None

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        # Validated as OpenAI tool objects but passed on as sent: the rendered schema (and so
        # the prompt the cache holds) is exactly the client's.
        for t in value or ():
            _Tool.model_validate(t)
        return value


def parse_body(raw: bytes) -> ChatBody:
    try:
        body = ChatBody.model_validate_json(raw)
    except ValidationError as e:
        raise WireError(validation_message(e)) from None
    check_supported(body)
    return body


def validation_message(e: ValidationError) -> str:
    """pydantic's first error as one line: where and what."""
    first = e.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "body"
    msg = " ".join(str(first["msg"]).split())[:200]
    return f"bad request: {where}: {msg}"


def check_supported(body: ChatBody) -> None:
    """What this server does not do, refused by name instead of answered wrongly."""
    if body.n != 1:
        raise WireError(f"bad request: n must be 1 (one choice per request), got {body.n}")
    if body.logprobs or body.top_logprobs:
        raise WireError("bad request: logprobs are not supported by this server")
    kind = (body.response_format or {}).get("type", "text")
    if kind != "text":
        raise WireError(
            f"bad request: response_format {kind!r} is not supported "
            "(no structured output); leave it out or use 'text'"
        )
    if body.tool_choice not in (None, "auto", "none"):
        shown = body.tool_choice if isinstance(body.tool_choice, str) else "a named function"
        raise WireError(
            f"bad request: tool_choice {shown!r} is not supported; use 'auto' or 'none'"
        )


def _text_of(content: str | list[dict[str, Any]] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    return "".join(p.get("text", "") for p in content if p.get("type") == "text")


def _user(m: _Message, media_dir: Path, allowed: tuple[Path, ...]) -> Message:
    if not isinstance(m.content, list):
        return Message("user", m.content or "")
    parts: list[MediaPart] = []
    for p in m.content:
        kind = _MEDIA_TYPES.get(str(p.get("type")))
        if kind is None:
            continue
        url = str(p[p["type"]]["url"])  # the shape is checked by _Message._parts
        parts.append(MediaPart(kind, save_media_url(url, media_dir, allowed)))  # type: ignore[arg-type]
    return Message("user", _text_of(m.content), media=tuple(parts))


def _arguments(fn: _Function) -> dict[str, Any]:
    if isinstance(fn.arguments, dict):
        return fn.arguments
    if not fn.arguments.strip():
        return {}
    try:
        value = json.loads(fn.arguments)
    except ValueError:
        raise WireError(f"bad request: arguments of {fn.name!r} are not JSON") from None
    if not isinstance(value, dict):
        raise WireError(f"bad request: arguments of {fn.name!r} are not a JSON object")
    return value


def to_message(m: _Message, media_dir: Path, allowed: tuple[Path, ...] = ()) -> Message:
    if m.role in ("system", "developer"):
        return Message("system", _text_of(m.content))
    if m.role == "user":
        return _user(m, media_dir, allowed)
    if m.role == "tool":
        return Message("tool", _text_of(m.content), tool_call_id=m.tool_call_id, name=m.name)
    calls = tuple(
        ToolCall(c.id or f"call_{i}", c.function.name, _arguments(c.function))
        for i, c in enumerate(m.tool_calls or ())
    )
    reasoning = m.reasoning_content if m.reasoning_content is not None else m.reasoning
    return Message(
        "assistant",
        _text_of(m.content),
        reasoning=reasoning,
        tool_calls=calls,
        raw_text=m.raw_text,
        thinking_mode=ThinkingMode(m.thinking_mode) if m.thinking_mode else None,
    )


def to_chat_request(
    body: ChatBody,
    request_id: str,
    media_dir: Path,
    default_thinking: str,
    *,
    max_context_tokens: int | None = None,
    allowed_media: tuple[Path, ...] = (),
) -> ChatRequest:
    """max_context_tokens: max_tokens is capped by it (no turn can outgrow the context, as
    vLLM caps it; the engine stops at the context's end in any case)."""
    kwargs = body.chat_template_kwargs or {}
    mode = kwargs.get("thinking_mode", default_thinking)
    # The system block's mode: fixed per session so that toggling the turn's mode keeps every
    # earlier token (adaptive unless the client's session started with another default).
    session_mode = kwargs.get("session_thinking_mode", "adaptive")
    for key, value in (("thinking_mode", mode), ("session_thinking_mode", session_mode)):
        if value not in THINKING_MODES:
            raise WireError(
                f"bad request: chat_template_kwargs.{key} must be one of "
                f"{', '.join(THINKING_MODES)}, got {value!r}"
            )
    max_tokens = body.max_completion_tokens or body.max_tokens or SamplingParams().max_tokens
    if max_context_tokens:
        max_tokens = min(max_tokens, max_context_tokens)
    return ChatRequest(
        request_id=request_id,
        messages=tuple(to_message(m, media_dir, allowed_media) for m in body.messages),
        tools=tuple(body.tools or ()),
        thinking_mode=ThinkingMode(mode),
        sampling=sampling_params(body, max_tokens),
        session_thinking_mode=ThinkingMode(session_mode),
        tool_choice=body.tool_choice,
    )


class SamplingFields(Protocol):
    """The sampling fields a chat and a completions body share (None: the engine's default)."""

    temperature: float | None
    top_p: float | None
    top_k: int | None
    seed: int | None
    stop: str | list[str] | None


def sampling_params(body: SamplingFields, max_tokens: int) -> SamplingParams:
    d = SamplingParams()
    stop = body.stop if isinstance(body.stop, list) else [body.stop] if body.stop else []
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=d.temperature if body.temperature is None else body.temperature,
        top_p=d.top_p if body.top_p is None else body.top_p,
        top_k=d.top_k if body.top_k is None else body.top_k,
        seed=body.seed,
        stop=tuple(stop),
    )


def usage_json(u: Usage) -> dict[str, Any]:
    details: dict[str, int] = {"cached_tokens": u.cached_prompt_tokens}
    if u.restored_prompt_tokens:  # our own keys: of the cached ones, read back from disk
        details["restored_tokens"] = u.restored_prompt_tokens
    if u.host_prompt_tokens:  # ... and kept in the host-memory tier
        details["host_tokens"] = u.host_prompt_tokens
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.generated_tokens,
        "total_tokens": u.prompt_tokens + u.generated_tokens,
        "prompt_tokens_details": details,
    }


def tool_call_json(index: int, call: ToolCall, *, with_index: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {
            "name": call.name,
            "arguments": json.dumps(call.arguments, ensure_ascii=False),
        },
    }
    if with_index:
        out["index"] = index
    return out


def error_json(message: str, kind: str = "invalid_request_error", code: int = 400) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "code": code}}).encode()
