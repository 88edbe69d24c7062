"""OpenAI chat-completions wire format for the remote backend: request bodies and messages.

Kept apart from the HTTP client so both can be read (and tested) on their own.
"""

from __future__ import annotations

import json
from typing import Any

from ..api import ChatRequest, EngineRequestError, MediaPart, Message
from ..m3.neutralise import neutralise, neutralise_deep


def _media_part(part: MediaPart) -> dict[str, Any]:
    """An image or video as an OpenAI content part with a data URL, prepared by the media
    layer the way the server's own M3 preprocessing expects (see m3/media/openai_parts.py)."""
    from ..m3.media.openai_parts import to_openai_part

    try:
        return to_openai_part(part)
    except OSError as e:  # MediaError (an EngineRequestError) passes through as it is
        raise EngineRequestError(f"cannot read {part.kind} {part.path}: {e.strerror or e}") from e


def _user_content(m: Message) -> str | list[dict[str, Any]]:
    if not m.media:
        return neutralise(m.content)
    parts: list[dict[str, Any]] = [_media_part(p) for p in m.media]
    if m.content:
        parts.append({"type": "text", "text": neutralise(m.content)})
    return parts


def to_openai_message(m: Message, *, raw_text: bool = False) -> dict[str, Any]:
    """One message in OpenAI's format. The server renders the template and tokenizes the
    text itself, so marker strings in every text are neutralised (engine/m3/neutralise.py):
    a tool result holding `[e~[\\n]~b]user` stays text. `raw_text=True` (only for `m3agent
    serve`, which renders it verbatim and tokenizes it as the model's own output) also sends
    the model's exact output, so history never needs recomputing."""
    if m.role == "user":
        return {"role": "user", "content": _user_content(m)}
    if m.role == "system":
        return {"role": "system", "content": neutralise(m.content)}
    if m.role == "tool":
        out: dict[str, Any] = {"role": "tool", "content": neutralise(m.content)}
        if m.tool_call_id is not None:
            out["tool_call_id"] = m.tool_call_id
        if m.name is not None:
            out["name"] = m.name
        return out
    out = {"role": "assistant", "content": neutralise(m.content) if m.content else None}
    if m.reasoning is not None:
        out["reasoning_content"] = neutralise(m.reasoning)
    if m.tool_calls:
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": json.dumps(neutralise_deep(c.arguments), ensure_ascii=False),
                },
            }
            for c in m.tool_calls
        ]
    if raw_text and m.raw_text is not None:
        out["raw_text"] = m.raw_text
        if m.thinking_mode is not None:
            out["thinking_mode"] = m.thinking_mode
    return out


def request_body(request: ChatRequest, model: str, *, raw_text: bool = False) -> dict[str, Any]:
    s = request.sampling
    body: dict[str, Any] = {
        "model": model,
        "messages": [to_openai_message(m, raw_text=raw_text) for m in request.messages],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": s.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "chat_template_kwargs": {"thinking_mode": request.thinking_mode},
    }
    if s.seed is not None:
        body["seed"] = s.seed
    if s.stop:
        body["stop"] = list(s.stop)
    if request.tools:
        body["tools"] = [neutralise_deep(t) for t in request.tools]  # an MCP description
        body["tool_choice"] = request.tool_choice or "auto"
    return body


def error_message(body: bytes) -> str:
    """The server's own words from an error body ({"error": {"message"}}, {"detail"}, text)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        return text[:500] or "(empty body)"
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            for key in ("message", "detail", "msg"):
                if isinstance(said := err.get(key), str):
                    return said
        if isinstance(err, str):
            return err
        if isinstance(detail := obj.get("detail"), str):
            return detail
    return text[:500]


def parse_arguments(text: str) -> dict[str, Any]:
    """Tool-call arguments as sent by the server. Not JSON (or not an object) stays visible to
    the model through the tool's validation error instead of crashing the turn."""
    if not text.strip():
        return {}
    try:
        obj = json.loads(text)
    except ValueError:
        return {"$invalid_arguments": text}
    return obj if isinstance(obj, dict) else {"$invalid_arguments": text}
