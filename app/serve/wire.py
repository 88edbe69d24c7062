"""The OpenAI chat-completions wire format on the server side.

Requests are validated with pydantic (JSON meets the outside here) and turned into our
ChatRequest; engine deltas are turned back into response objects and stream chunks.
Images and videos arrive as data URLs; they are written to files in the server's media
directory because the m3 media layer reads paths.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from m3agent.engine.api import (
    THINKING_MODES,
    ChatRequest,
    MediaPart,
    Message,
    SamplingParams,
    ToolCall,
    Usage,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError


class WireError(ValueError):
    """A request the server rejects with HTTP 400; the message names the cause."""


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
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    # Accepted so that an unsupported value is a clear 400, not silently ignored.
    n: int = 1
    logprobs: bool | None = None
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None
    tool_choice: str | dict[str, Any] | None = None


def parse_body(raw: bytes) -> ChatBody:
    try:
        body = ChatBody.model_validate_json(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        raise WireError(f"bad request: {where}: {first['msg']}") from None
    check_supported(body)
    return body


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


_MEDIA_TYPES = {"image_url": "image", "video_url": "video"}


def _save_data_url(url: str, media_dir: Path) -> str:
    """A data URL to a file named by its hash (the same picture twice is one file)."""
    if url.startswith("file://"):
        return url[len("file://") :]
    if not url.startswith("data:") or "," not in url:
        raise WireError("bad request: media must be a data: URL (the server fetches nothing)")
    head, payload = url[5:].split(",", 1)
    if not head.endswith(";base64"):
        raise WireError("bad request: media data URLs must be base64")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise WireError("bad request: media data URL is not valid base64") from None
    mime = head[: -len(";base64")]
    ext = {"image/png": ".png", "image/jpeg": ".jpg", "video/mp4": ".mp4"}.get(mime, ".bin")
    media_dir.mkdir(parents=True, exist_ok=True)
    path = media_dir / (hashlib.sha256(data).hexdigest()[:32] + ext)
    if not path.exists():
        path.write_bytes(data)
    return str(path)


def _user(m: _Message, media_dir: Path) -> Message:
    if not isinstance(m.content, list):
        return Message("user", m.content or "")
    parts: list[MediaPart] = []
    for p in m.content:
        kind = _MEDIA_TYPES.get(str(p.get("type")))
        if kind is None:
            continue
        url = (p.get(p["type"]) or {}).get("url", "")
        parts.append(MediaPart(kind, _save_data_url(str(url), media_dir)))  # type: ignore[arg-type]
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


def to_message(m: _Message, media_dir: Path) -> Message:
    if m.role in ("system", "developer"):
        return Message("system", _text_of(m.content))
    if m.role == "user":
        return _user(m, media_dir)
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
        thinking_mode=m.thinking_mode,
    )


def to_chat_request(
    body: ChatBody, request_id: str, media_dir: Path, default_thinking: str
) -> ChatRequest:
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
    d = SamplingParams()
    stop = body.stop if isinstance(body.stop, list) else [body.stop] if body.stop else []
    sampling = SamplingParams(
        max_tokens=body.max_completion_tokens or body.max_tokens or d.max_tokens,
        temperature=d.temperature if body.temperature is None else body.temperature,
        top_p=d.top_p if body.top_p is None else body.top_p,
        top_k=d.top_k if body.top_k is None else body.top_k,
        seed=body.seed,
        stop=tuple(stop),
    )
    return ChatRequest(
        request_id=request_id,
        messages=tuple(to_message(m, media_dir) for m in body.messages),
        tools=tuple(body.tools or ()),
        thinking_mode=mode,
        sampling=sampling,
        session_thinking_mode=session_mode,
        tool_choice=body.tool_choice,
    )


def usage_json(u: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.generated_tokens,
        "total_tokens": u.prompt_tokens + u.generated_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_prompt_tokens},
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
