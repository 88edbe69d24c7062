"""The remote backend's /v1/completions wire: request bodies, stream chunks, server detection.

vLLM and m3agent serve `/v1/completions`; their `/v1/models` cards say `owned_by` "vllm" /
"m3agent". Other OpenAI-compatible servers get the chat endpoint (remote_format.py).
"""

from __future__ import annotations

import json
from typing import Any

from ..api import ChatRequest, EngineError, EngineProtocolError, PrefillProgress

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


# m3agent serve's extension of the completions stream: asked for in stream_options, it sends
# chunks with no choices and this object while the prompt is prefilled (app/serve).
PREFILL_OPTION = "m3agent_prefill_progress"
PREFILL_FIELD = "m3agent_prefill"


def prefill_json(p: PrefillProgress) -> dict[str, Any]:
    return {
        "prompt_tokens": p.prompt_tokens,
        "computed_tokens": p.computed_tokens,
        "cached_tokens": p.cached_tokens,
        "elapsed_s": round(p.elapsed_s, 3),
    }


def prefill_of(obj: dict[str, Any]) -> PrefillProgress | None:
    """The chunk's prefill progress, or None (none there, or not well formed: it only feeds a
    progress line, so a server's odd value is dropped, never trusted into arithmetic)."""
    v = obj.get(PREFILL_FIELD)
    if not isinstance(v, dict):
        return None
    ints: list[int] = []
    for k in ("prompt_tokens", "computed_tokens", "cached_tokens"):
        i = v.get(k)
        if type(i) is not int or not 0 <= i < 1 << 40:
            return None
        ints.append(i)
    elapsed = v.get("elapsed_s")
    if not isinstance(elapsed, int | float) or isinstance(elapsed, bool):
        return None
    if not 0 <= elapsed < 1e7:
        return None
    total, done, cached = ints
    if not cached <= done <= total:
        return None
    return PrefillProgress(total, done, cached, float(elapsed))


def completion_body(
    request: ChatRequest, model: str, prompt: str | list[int], *, prefill_progress: bool = False
) -> dict[str, Any]:
    """A /v1/completions body for a prompt we rendered (vLLM's extra sampling fields kept:
    top_k; special tokens kept in the text, M3's markup is what our parsers read).
    prefill_progress: ask m3agent serve for its prefill chunks (only ours understands it)."""
    s = request.sampling
    options: dict[str, Any] = {"include_usage": True}
    if prefill_progress:
        options[PREFILL_OPTION] = True
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "stream": True,
        "stream_options": options,
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
