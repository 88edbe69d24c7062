"""`POST /v1/completions` of `m3agent serve`: a raw prompt (text or token ids) in, raw text out.

The OpenAI/vLLM completions shape: streaming (SSE) or not, usage with
prompt_tokens_details.cached_tokens. The text is the model's own, unparsed: a client that
renders its prompts itself (m3agent's remote backend) parses it with its own M3 parsers, and
its prompt is exactly what it rendered, so a per-turn thinking toggle touches only the
generation prefix and every earlier token stays cached.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from m3agent.engine.api import (
    ChatDelta,
    ContentDelta,
    Engine,
    EngineError,
    PrefillProgress,
    PromptTooLong,
    UsageDelta,
)
from m3agent.engine.backends.completion import CompletionEngine, CompletionRequest
from m3agent.engine.backends.remote_completion import PREFILL_FIELD, PREFILL_OPTION, prefill_json
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import WireError
from .http import HttpResponse
from .wire import (
    BYTES_PER_TOKEN,
    INT64,
    error_json,
    sampling_params,
    usage_json,
    validation_message,
)

# The HTTP status of an engine error; a response's SSE events (chat or completions) over deltas.
StatusOf = Callable[[EngineError], int]
Render = Callable[[AsyncIterator[ChatDelta]], AsyncIterator[str]]


class CompletionBody(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str = ""
    prompt: str | list[int] | list[str] | list[list[int]]
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    max_tokens: int | None = Field(default=16, ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1, lt=2**31)
    seed: int | None = Field(default=None, ge=-INT64, lt=INT64)
    stop: str | list[str] | None = None
    n: int = 1
    logprobs: int | None = None
    echo: bool = False
    suffix: str | None = None


def parse_completion(
    raw: bytes, request_id: str, max_context_tokens: int | None = None
) -> tuple[CompletionBody, CompletionRequest]:
    """max_context_tokens: a prompt longer than the context is refused, and max_tokens is
    capped by the context left after the prompt (as vLLM caps it)."""
    try:
        body = CompletionBody.model_validate_json(raw)
    except ValidationError as e:
        raise WireError(validation_message(e)) from None
    if body.n != 1:
        raise WireError("bad request: n must be 1 (one completion per request)")
    for name in ("logprobs", "suffix"):
        if getattr(body, name) is not None:
            raise WireError(f"bad request: {name} is not supported by this server")
    if body.echo:
        raise WireError("bad request: echo is not supported by this server")
    prompt = body.prompt
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        raise WireError("bad request: prompt: one prompt per request (a string or token ids)")
    if not prompt:
        raise WireError("bad request: prompt is empty")
    max_tokens = body.max_tokens or 16
    if max_context_tokens:
        # Token ids are counted exactly; text is bounded by its bytes (it is tokenized later).
        # In the engines' own words (PromptTooLong), so that token ids and text over the
        # context read the same whichever path refused them.
        n = len(prompt) if not isinstance(prompt, str) else 0
        if n >= max_context_tokens:
            raise WireError(str(PromptTooLong(n, max_context_tokens - 1)))
        size = len(prompt.encode()) if isinstance(prompt, str) else 0
        if size > max_context_tokens * BYTES_PER_TOKEN:
            raise WireError(
                f"prompt is {size} bytes of text, more than the model's maximum of "
                f"{max_context_tokens - 1} tokens can hold"
            )
        max_tokens = min(max_tokens, max_context_tokens - n)
    sampling = sampling_params(body, max_tokens)
    if isinstance(prompt, str):
        return body, CompletionRequest(request_id, prompt_text=prompt, sampling=sampling)
    return body, CompletionRequest(
        # A list whose first item is an int: pydantic read the whole list as list[int].
        request_id,
        prompt_token_ids=tuple(int(t) for t in cast("list[int]", prompt)),
        sampling=sampling,
    )


def new_request_id() -> str:
    return f"cmpl-{uuid.uuid4().hex}"


def _completion(
    request_id: str, created: int, model: str, choices: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    """A text_completion object (the whole answer, or one chunk of a stream)."""
    return {
        "id": request_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
        **extra,
    }


def _choice(text: str, finish: str | None) -> dict[str, Any]:
    return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}


def completion_json(
    request_id: str, model: str, text: str, final: UsageDelta | None
) -> dict[str, Any]:
    choice = _choice(text, final.finish_reason if final else "stop")
    usage = {"usage": usage_json(final.usage)} if final is not None else {}
    return _completion(request_id, int(time.time()), model, [choice], **usage)


async def completion_events(
    request_id: str,
    model: str,
    body: CompletionBody,
    deltas: AsyncIterator[ChatDelta],
    status_of: StatusOf,
) -> AsyncIterator[str]:
    created = int(time.time())
    include_usage = bool((body.stream_options or {}).get("include_usage"))
    # m3agent's own client (engine/backends/remote.py, attached to this server) asks for the
    # prefill's progress: chunks with no choices and an "m3agent_prefill" object, which an
    # OpenAI client that did not ask never sees.
    progress = bool((body.stream_options or {}).get(PREFILL_OPTION))

    def frame(choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return _completion(request_id, created, model, choices, **extra)

    def chunk(text: str, finish: str | None = None) -> str:
        return json.dumps(frame([_choice(text, finish)]), ensure_ascii=False)

    final: UsageDelta | None = None
    try:
        async for d in deltas:
            if isinstance(d, ContentDelta):
                yield chunk(d.text)
            elif isinstance(d, UsageDelta):
                final = d
            elif isinstance(d, PrefillProgress) and progress:
                yield json.dumps(frame([], **{PREFILL_FIELD: prefill_json(d)}))
    except EngineError as e:
        yield json.dumps({"error": {"message": str(e), "code": status_of(e)}})
        yield "[DONE]"
        return
    yield chunk("", final.finish_reason if final else "stop")
    if include_usage and final is not None:
        yield json.dumps(frame([], usage=usage_json(final.usage)))
    yield "[DONE]"


def not_served(engine: Engine) -> HttpResponse:
    """/v1/completions of an engine that serves chat completions only."""
    backend = engine.info().backend
    return HttpResponse(
        404,
        error_json(
            f"the {backend} engine serves chat completions only (no /v1/completions)",
            "not_found",
            404,
        ),
    )


async def serve_completion(
    engine: CompletionEngine,
    model: str,
    body: CompletionBody,
    creq: CompletionRequest,
    status_of: StatusOf,
) -> HttpResponse:
    """The response to one completion: SSE (the status line only after the first delta, so
    that a request the engine refuses at once is an HTTP error) or one JSON object."""
    rid = creq.request_id
    if body.stream:
        return await open_stream(
            engine,
            rid,
            engine.complete(creq),
            status_of,
            lambda deltas: completion_events(rid, model, body, deltas, status_of),
        )
    try:
        deltas = await collect_deltas(engine, rid, engine.complete(creq))
    except EngineError as e:
        code = status_of(e)
        return HttpResponse(code, error_json(str(e), "engine_error", code))
    text = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
    return HttpResponse.json(completion_json(rid, model, text, last_usage(deltas)))


async def collect_deltas(
    engine: Engine, request_id: str, stream: AsyncIterator[ChatDelta]
) -> list[ChatDelta]:
    """Every delta of a non-streamed answer; if this is cancelled first (the client hung up),
    the engine request is aborted: no generating for nobody."""
    deltas: list[ChatDelta] = []
    ended = False
    try:
        async for d in stream:
            deltas.append(d)
        ended = True
    except EngineError:
        ended = True
        raise
    finally:
        if not ended:
            await engine.abort(request_id)
    return deltas


def last_usage(deltas: list[ChatDelta]) -> UsageDelta | None:
    return next((d for d in reversed(deltas) if isinstance(d, UsageDelta)), None)


async def open_stream(
    engine: Engine,
    request_id: str,
    stream: AsyncIterator[ChatDelta],
    status_of: StatusOf,
    render: Render,
) -> HttpResponse:
    """An SSE response of render's events over stream. It waits for the first delta before
    the status line, so that a request the engine refuses at once (prompt too long, bad media)
    is an HTTP error, not a 200 stream."""
    stream = aiter(stream)
    try:
        first = await anext(stream)
    except StopAsyncIteration:
        first = None
    except EngineError as e:
        code = status_of(e)
        return HttpResponse(code, error_json(str(e), "engine_error", code))
    except asyncio.CancelledError:  # the client hung up during the prefill
        await engine.abort(request_id)
        raise
    return HttpResponse(events=guarded_events(engine, request_id, stream, first, render))


async def guarded_events(
    engine: Engine,
    request_id: str,
    stream: AsyncIterator[ChatDelta],
    first: ChatDelta | None,
    render: Render,
) -> AsyncIterator[str]:
    """`render`'s events over first + the rest of stream (a response's SSE events, chat or
    completions); the engine request is aborted if the client leaves before the end."""
    ended = False

    async def deltas() -> AsyncIterator[ChatDelta]:
        if first is not None:
            yield first
        async for d in stream:
            yield d

    try:
        async for event in render(deltas()):
            yield event
        ended = True
    finally:
        if not ended:
            await engine.abort(request_id)
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
