"""Routes of `m3agent serve` over any Engine.

GET  /health                 {"status": "ok", "pid", "model", "backend"}
GET  /v1/models              the one served model
GET  /v1/models/{id}         that model, or 404
POST /v1/chat/completions    streaming (SSE) or not; usage carries
                             prompt_tokens_details.cached_tokens; thinking mode per request
                             through chat_template_kwargs.thinking_mode (the turn's: the
                             generation prefix) and .session_thinking_mode (the system block's)
POST /v1/completions         a raw prompt (text or token ids) -> the model's raw text, streaming
                             or not, usage with cached tokens (see completions.py)
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from m3agent.engine.api import (
    ChatDelta,
    ChatRequest,
    ContentDelta,
    Engine,
    EngineError,
    EngineRequestError,
    EngineUnavailable,
    ReasoningDelta,
    ToolCallDelta,
    UsageDelta,
)
from m3agent.engine.backends.completion import CompletionEngine

from .completions import (
    collect_deltas,
    last_usage,
    new_request_id,
    not_served,
    open_stream,
    parse_completion,
    serve_completion,
)
from .errors import WireError
from .http import HttpRequest, HttpResponse
from .wire import (
    BYTES_PER_TOKEN,
    ChatBody,
    error_json,
    parse_body,
    text_bytes,
    to_chat_request,
    tool_call_json,
    usage_json,
)

T = TypeVar("T")
# Media (data URLs) a request may carry on top of its text, by default: a few images.
DEFAULT_MEDIA_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServeConfig:
    served_model_name: str
    media_dir: Path
    default_thinking: str = "adaptive"
    aliases: tuple[str, ...] = ()  # other names a request may use (the model path, a repo id)
    allowed_media: tuple[Path, ...] = ()  # directories file:// URLs may name (resolved)
    media_bytes: int = DEFAULT_MEDIA_BYTES


def body_limit(max_context_tokens: int, media_bytes: int = DEFAULT_MEDIA_BYTES) -> int:
    """The largest request body worth reading: the text the context can hold, plus media."""
    return max_context_tokens * BYTES_PER_TOKEN + media_bytes + 64 * 1024


_OFF_LOOP_BYTES = 1 << 20  # a body this large is parsed in a worker thread


async def _off_loop(fn: Callable[..., T], req_or_body: Any, *args: Any) -> T:
    """fn(req_or_body, *args), in a worker thread when the body is large: parsing 50 MB of
    JSON (and decoding its media) on the event loop kept /health from answering for
    seconds. Small bodies are parsed in place (a thread hop costs more than they do)."""
    raw = req_or_body.body if isinstance(req_or_body, HttpRequest) else req_or_body
    if len(raw) < _OFF_LOOP_BYTES:
        return fn(req_or_body, *args)
    return await asyncio.to_thread(fn, req_or_body, *args)


def _status_of(e: EngineError) -> int:
    if isinstance(e, EngineRequestError):
        return 400
    if isinstance(e, EngineUnavailable):
        return 503
    return 500


class ChatServer:
    def __init__(self, engine: Engine, config: ServeConfig) -> None:
        self.engine = engine
        self.config = config
        self.started = int(time.time())

    async def handle(self, req: HttpRequest) -> HttpResponse:
        if req.path in ("/health", "/v1/health"):
            info = self.engine.info()
            return HttpResponse.json(
                {
                    "status": "ok",
                    "pid": os.getpid(),
                    "model": self.config.served_model_name,
                    "backend": info.backend,
                }
            )
        if req.path == "/v1/models":
            return HttpResponse.json({"object": "list", "data": [self._model_card()]})
        if req.path.startswith("/v1/models/"):
            wanted = req.path[len("/v1/models/") :]
            if wanted in (self.config.served_model_name, *self.config.aliases):
                return HttpResponse.json(self._model_card())
            return HttpResponse(
                404, error_json(f"model {wanted!r} is not served here", "not_found", 404)
            )
        if req.path == "/v1/completions":
            if req.method != "POST":
                return HttpResponse(405, error_json("use POST", code=405))
            return await self._completion(req)
        if req.path == "/v1/chat/completions":
            if req.method != "POST":
                return HttpResponse(405, error_json("use POST", code=405))
            return await self._chat(req)
        return HttpResponse(404, error_json(f"no route {req.path}", "not_found", 404))

    def _model_card(self) -> dict[str, Any]:
        info = self.engine.info()
        return {
            "id": self.config.served_model_name,
            "object": "model",
            "created": self.started,
            "owned_by": "m3agent",
            "max_model_len": info.max_context_tokens,
            "backend": info.backend,
        }

    async def _chat(self, req: HttpRequest) -> HttpResponse:
        prepared = await _off_loop(self._prepare_chat, req)
        if isinstance(prepared, HttpResponse):
            return prepared
        chat, body = prepared
        if body.stream:
            return await self._open_stream(chat, body)
        return await self._complete(chat)

    def _prepare_chat(self, req: HttpRequest) -> HttpResponse | tuple[ChatRequest, ChatBody]:
        """The body parsed, checked and turned into the engine's request (media decoded and
        written), or the error response."""
        try:
            body = parse_body(req.body)
            names = (self.config.served_model_name, *self.config.aliases)
            if body.model and body.model not in names:
                return HttpResponse(
                    404,
                    error_json(
                        f"model {body.model!r} is not served here (this server has "
                        f"{self.config.served_model_name!r})",
                        "not_found",
                        404,
                    ),
                )
            ctx = self.engine.info().max_context_tokens
            if (size := text_bytes(body)) > ctx * BYTES_PER_TOKEN:
                return HttpResponse(
                    413,
                    error_json(
                        f"the request's text ({size} bytes) cannot fit in the model's context "
                        f"of {ctx} tokens",
                        code=413,
                    ),
                )
            request_id = f"chatcmpl-{uuid.uuid4().hex}"
            chat = to_chat_request(
                body,
                request_id,
                self.config.media_dir,
                self.config.default_thinking,
                max_context_tokens=ctx,
                allowed_media=self.config.allowed_media,
            )
        except WireError as e:
            return HttpResponse(400, error_json(str(e)))
        return chat, body

    def _unknown_model(self, model: str) -> HttpResponse | None:
        if not model or model in (self.config.served_model_name, *self.config.aliases):
            return None
        return HttpResponse(
            404,
            error_json(
                f"model {model!r} is not served here (this server has "
                f"{self.config.served_model_name!r})",
                "not_found",
                404,
            ),
        )

    async def _completion(self, req: HttpRequest) -> HttpResponse:
        engine = self.engine
        # The capability is declared: mypy checks each backend against CompletionEngine.
        if not isinstance(engine, CompletionEngine):
            return not_served(engine)
        request_id = new_request_id()
        ctx = self.engine.info().max_context_tokens
        try:
            body, creq = await _off_loop(parse_completion, req.body, request_id, ctx)
        except WireError as e:
            return HttpResponse(400, error_json(str(e)))
        if (unknown := self._unknown_model(body.model)) is not None:
            return unknown
        return await serve_completion(engine, self.config.served_model_name, body, creq, _status_of)

    async def _open_stream(self, chat: ChatRequest, body: ChatBody) -> HttpResponse:
        return await open_stream(
            self.engine,
            chat.request_id,
            self.engine.stream(chat),
            _status_of,
            lambda deltas: self._sse(chat, body, deltas),
        )

    async def _complete(self, chat: ChatRequest) -> HttpResponse:
        try:
            deltas = await collect_deltas(self.engine, chat.request_id, self.engine.stream(chat))
        except EngineError as e:
            code = _status_of(e)
            return HttpResponse(code, error_json(str(e), "engine_error", code))
        content = [d.text for d in deltas if isinstance(d, ContentDelta)]
        reasoning = [d.text for d in deltas if isinstance(d, ReasoningDelta)]
        calls = [
            tool_call_json(d.index, d.call, with_index=False)
            for d in deltas
            if isinstance(d, ToolCallDelta)
        ]
        final = last_usage(deltas)
        message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
        if reasoning:
            message["reasoning_content"] = "".join(reasoning)
        if calls:
            message["tool_calls"] = calls
        if final is not None and final.raw_text is not None:
            # m3agent's extension: the exact output, for a client to send back as raw_text.
            message["raw_text"] = final.raw_text
        obj = {
            "id": chat.request_id,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.config.served_model_name,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": final.finish_reason if final else "stop",
                }
            ],
        }
        if final is not None:
            obj["usage"] = usage_json(final.usage)
        return HttpResponse.json(obj)

    async def _sse(
        self, chat: ChatRequest, body: ChatBody, deltas: AsyncIterator[ChatDelta]
    ) -> AsyncIterator[str]:
        created = int(time.time())
        include_usage = bool((body.stream_options or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            return json.dumps(
                {
                    "id": chat.request_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": self.config.served_model_name,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                },
                ensure_ascii=False,
            )

        yield chunk({"role": "assistant", "content": ""})
        final: UsageDelta | None = None
        try:
            async for d in deltas:
                if isinstance(d, ContentDelta):
                    yield chunk({"content": d.text})
                elif isinstance(d, ReasoningDelta):
                    yield chunk({"reasoning_content": d.text})
                elif isinstance(d, ToolCallDelta):
                    yield chunk({"tool_calls": [tool_call_json(d.index, d.call, with_index=True)]})
                elif isinstance(d, UsageDelta):
                    final = d
        except EngineError as e:
            # Mid-stream the status line is gone already: the error travels as a chunk.
            yield json.dumps({"error": {"message": str(e), "code": _status_of(e)}})
            yield "[DONE]"
            return
        yield chunk({}, final.finish_reason if final else "stop")
        if include_usage and final is not None:
            yield json.dumps(
                {
                    "id": chat.request_id,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": self.config.served_model_name,
                    "choices": [],
                    "usage": usage_json(final.usage),
                }
            )
        yield "[DONE]"
