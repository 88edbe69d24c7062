"""The remote backend's /v1/completions wire: request bodies, stream chunks, server detection.

vLLM and m3agent serve `/v1/completions`; their `/v1/models` cards say `owned_by` "vllm" /
"m3agent". Other OpenAI-compatible servers get the chat endpoint (remote_format.py).
"""

from __future__ import annotations

import json
from typing import Any

from ..api import ChatRequest, EngineError, EngineProtocolError

_RENDERING_SERVERS = ("vllm", "m3agent")  # /v1/models owned_by of servers with /v1/completions


class NoCompletions(Exception):
    """The server answered 404 to /v1/completions: use its chat endpoint from now on."""


def chunk_object(payload: str, origin: str) -> dict[str, Any]:
    try:
        obj = json.loads(payload)
    except ValueError as e:
        raise EngineProtocolError(
            f"malformed stream from {origin}: not JSON ({e}): {payload[:80]!r}"
        ) from e
    if not isinstance(obj, dict):
        raise EngineProtocolError(f"malformed stream from {origin}: chunk is not an object")
    if "error" in obj:
        err = obj["error"]
        msg = err.get("message") if isinstance(err, dict) else str(err)
        raise EngineError(f"the server {origin} failed mid-stream: {msg}")
    return obj


def renders_prompts(status: int, body: bytes) -> bool:
    """True when a /v1/models answer names a server with /v1/completions."""
    if status != 200:
        return False
    try:
        cards = json.loads(body).get("data") or []
    except (ValueError, AttributeError):
        return False
    return any(isinstance(c, dict) and c.get("owned_by") in _RENDERING_SERVERS for c in cards)


def completion_body(request: ChatRequest, model: str, prompt: str | list[int]) -> dict[str, Any]:
    """A /v1/completions body for a prompt we rendered (vLLM's extra sampling fields kept:
    top_k; special tokens kept in the text, M3's markup is what our parsers read)."""
    s = request.sampling
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": s.max_tokens,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "skip_special_tokens": False,
    }
    if s.seed is not None:
        body["seed"] = s.seed
    if s.stop:
        body["stop"] = list(s.stop)
    return body
