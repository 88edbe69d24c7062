"""RemoteEngine: an OpenAI-compatible server (vLLM `serve`, `m3agent serve`) over httpx.

On vLLM and m3agent servers (told by `/v1/models` owned_by, once) a text turn is rendered
here, by the shared chat layer, and sent to `/v1/completions` (as token ids when the tokenizer
is at hand, else as text); the output is parsed by our own M3 parsers. The prompt the server
caches is then exactly the one we rendered: a per-turn thinking toggle changes only the
generation prefix, never earlier tokens (a chat endpoint would re-render with the mode in the
system block). Other servers, a 404 on /v1/completions, and turns with images or videos use
`/v1/chat/completions`.

Streams with usage, passes tools and `chat_template_kwargs.thinking_mode`, retries what is
worth retrying (connect errors, 502/503/504) with exponential backoff, and turns every failure
into one clear EngineError line: refused connection -> EngineUnavailable, 4xx ->
EngineRequestError with the server's message, 5xx -> EngineError, a malformed or broken
stream -> EngineProtocolError.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from ..api import (
    ChatDelta,
    ChatRequest,
    EngineError,
    EngineInfo,
    EngineName,
    EngineProtocolError,
    EngineRequestError,
    EngineStats,
    EngineUnavailable,
    FinishReason,
    ToolCallDelta,
    Usage,
    UsageDelta,
)
from ..m3.chat import ChatLayer, render_parts
from ..m3.chat_template import ChatTemplate
from ..m3.neutralise import prompt_text
from .remote_completion import (
    NoCompletions,
    chunk_object,
    completion_body,
    prefill_of,
    renders_prompts,
)
from .remote_format import error_message, request_body
from .remote_stream import ContentReparser, StreamDecoder

_RETRY_STATUS = (502, 503, 504)
# The server's reasons passed on as they are; any other (its "error" included) reads as "stop".
_FINISH = {r.value: r for r in FinishReason if r is not FinishReason.ERROR}


class RemoteEngine:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 600.0,
        retries: int = 3,
        *,
        connect_timeout: float = 10.0,
        backoff_s: float = 0.5,
        max_context_tokens: int = 196_608,
        send_raw_text: bool = False,
        unix_socket: str | None = None,
        tokenizer: Any = None,
        template: ChatTemplate | None = None,
        completions: bool | None = None,
    ):
        """tokenizer: the model's (M3Tokenizer), to send prompts as token ids; template: the
        checkpoint's chat template (built-in when None); completions: use /v1/completions
        (True), never (False), or when the server says it is vLLM or m3agent (None)."""
        self._chat = ChatLayer(tokenizer, template)
        self._completions = completions
        # Only `m3agent serve` understands the extra field; a plain vLLM server re-renders.
        self._send_raw_text = send_raw_text
        self._unix_socket = unix_socket  # talk HTTP over this socket (m3agent serve --socket)
        if retries < 0:
            raise ValueError(f"retries must be 0 or more, got {retries}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        url = httpx.URL(base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base URL {base_url!r} is not an http(s) URL")
        self.base_url = str(url)
        self.origin = f"{url.scheme}://{url.host}" + (f":{url.port}" if url.port else "")
        self.model = model
        self._api_key = api_key
        self._retries = retries
        self._backoff_s = backoff_s
        self._max_ctx = max_context_tokens
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        self._client: httpx.AsyncClient | None = None
        self._active: dict[str, httpx.Response] = {}
        self._aborted: set[str] = set()

    # ---- Engine protocol ------------------------------------------------------------------

    def info(self) -> EngineInfo:
        return EngineInfo(
            backend=EngineName.REMOTE, model=self.model, max_context_tokens=self._max_ctx
        )

    def stats(self) -> EngineStats:
        return self._chat.stats.get()

    async def abort(self, request_id: str) -> None:
        self._aborted.add(request_id)
        resp = self._active.get(request_id)
        if resp is not None:
            await resp.aclose()  # closing the connection makes the server stop generating

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        has_media = any(m.media for m in request.messages)
        if not has_media and await self._serves_completions():
            try:
                async for d in self._stream_completion(request):
                    yield d
                return
            except NoCompletions:
                self._completions = False  # a 404: this server has no /v1/completions
        async for d in self._stream_chat(request):
            yield d

    async def _serves_completions(self) -> bool:
        if self._completions is None:
            self._completions = await self._probe()
        return self._completions

    async def _probe(self) -> bool:
        """True when /v1/models says vLLM or m3agent (both serve /v1/completions)."""
        client = self._http()
        try:
            resp = await client.get(f"{self.base_url}/models", headers={"Accept": "*/*"})
        except httpx.HTTPError:
            return False
        return renders_prompts(resp.status_code, resp.content)

    async def _stream_completion(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        try:
            parts = render_parts(self._chat.template, request)
        except ValueError as e:
            raise EngineRequestError(f"cannot render the prompt: {e}") from None
        if self._chat.tokenizer is not None:
            prompt: str | list[int] = self._chat.encode(parts)
        else:  # the server tokenizes the text: no marker string of outside text may reach it
            prompt = prompt_text(parts)
        # Timed from the request, not from the response's headers: a server that sends them
        # with the first token would otherwise hide its whole prefill from the TTFT.
        turn = self._chat.start(request)
        body = completion_body(request, self.model, prompt, prefill_progress=self._send_raw_text)
        resp = await self._open(body, "/completions")
        self._active[request.request_id] = resp
        usage: dict[str, Any] = {}
        reason: str | None = None
        done = False
        try:
            async for payload in self._events(resp, request.request_id):
                if payload == "[DONE]":
                    done = True
                    break
                obj = chunk_object(payload, self.origin)
                if (progress := prefill_of(obj)) is not None:
                    yield progress
                for ch in obj.get("choices") or []:
                    for d in turn.feed(str(ch.get("text") or "")):
                        yield d
                    reason = ch.get("finish_reason") or reason
                if isinstance(obj.get("usage"), dict):
                    usage = obj["usage"]
            aborted = request.request_id in self._aborted
            if not aborted and not done and reason is None:
                raise EngineProtocolError(
                    f"the stream from {self.origin} ended before the response was complete"
                )
            details = usage.get("prompt_tokens_details") or {}
            for d in turn.finish(
                "abort" if aborted else reason,
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                cached_tokens=int(details.get("cached_tokens") or 0),
                generated_tokens=int(usage.get("completion_tokens") or 0),
                error=f"the server {self.origin} ended the request with an error",
                restored_tokens=int(details.get("restored_tokens") or 0),
                host_tokens=int(details.get("host_tokens") or 0),
            ):
                yield d
        finally:
            self._active.pop(request.request_id, None)
            self._aborted.discard(request.request_id)
            await resp.aclose()

    async def _events(self, resp: httpx.Response, request_id: str) -> AsyncIterator[str]:
        """The `data:` payloads of an SSE response; transport failures as EngineErrors."""
        try:
            async for line in resp.aiter_lines():
                if line.startswith("data:"):
                    yield line[5:].strip()
        except (httpx.StreamClosed, httpx.ReadError, httpx.RemoteProtocolError) as e:
            if request_id not in self._aborted:
                raise EngineProtocolError(f"the stream from {self.origin} broke: {_why(e)}") from e
        except httpx.TimeoutException as e:
            raise EngineError(
                f"the server {self.origin} sent nothing for {self._timeout.read:g}s"
            ) from e

    async def _stream_chat(self, request: ChatRequest) -> AsyncIterator[ChatDelta]:
        started = time.monotonic()
        body = request_body(request, self.model, raw_text=self._send_raw_text)
        resp = await self._open(body)
        self._active[request.request_id] = resp
        decoder = StreamDecoder(
            ContentReparser(list(request.tools), request.thinking_mode, request.tool_choice),
            self.origin,
        )
        first_at: float | None = None
        try:
            try:
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue  # SSE comments, event names, keep-alives
                    for d in decoder.feed_data(line[5:]):
                        if first_at is None:
                            first_at = time.monotonic() - started
                        yield d
                    if decoder.done:
                        break
            except (httpx.StreamClosed, httpx.ReadError, httpx.RemoteProtocolError) as e:
                if request.request_id not in self._aborted:
                    raise EngineProtocolError(
                        f"the stream from {self.origin} broke: {_why(e)}"
                    ) from e
            except httpx.TimeoutException as e:
                raise EngineError(
                    f"the server {self.origin} sent nothing for {self._timeout.read:g}s"
                ) from e
            aborted = request.request_id in self._aborted
            if not aborted and not decoder.done and decoder.finish_reason is None:
                raise EngineProtocolError(
                    f"the stream from {self.origin} ended before the response was complete"
                )
            tail = decoder.finish()
            for d in tail:
                yield d
            usage = decoder.final_usage()
            usage = Usage(
                prompt_tokens=usage.prompt_tokens,
                cached_prompt_tokens=usage.cached_prompt_tokens,
                restored_prompt_tokens=usage.restored_prompt_tokens,
                host_prompt_tokens=usage.host_prompt_tokens,
                generated_tokens=usage.generated_tokens,
                time_to_first_token_s=first_at,
                total_time_s=time.monotonic() - started,
            )
            self._chat.stats.add(usage)
            finish = (
                FinishReason.ABORT
                if aborted
                else _FINISH.get(decoder.finish_reason or "stop", FinishReason.STOP)
            )
            if finish is FinishReason.STOP and any(isinstance(d, ToolCallDelta) for d in tail):
                finish = FinishReason.TOOL_CALLS
            yield UsageDelta(usage=usage, finish_reason=finish)
        finally:
            self._active.pop(request.request_id, None)
            self._aborted.discard(request.request_id)
            await resp.aclose()

    # ---- HTTP ------------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Accept": "text/event-stream"}
            if self._api_key:
                headers["Authorization"] = f"Bearer {self._api_key}"
            transport = (
                httpx.AsyncHTTPTransport(uds=self._unix_socket) if self._unix_socket else None
            )
            self._client = httpx.AsyncClient(
                timeout=self._timeout, headers=headers, transport=transport
            )
        return self._client

    async def _open(self, body: dict[str, Any], path: str = "/chat/completions") -> httpx.Response:
        url = f"{self.base_url}{path}"
        last: EngineError | None = None
        for attempt in range(self._retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff_s * 2 ** (attempt - 1))
            client = self._http()
            try:
                resp = await client.send(client.build_request("POST", url, json=body), stream=True)
            except httpx.ConnectError as e:
                last = EngineUnavailable(f"cannot reach {self.origin}: {_why(e)}")
                continue
            except httpx.TimeoutException as e:
                last = EngineUnavailable(
                    f"cannot reach {self.origin}: timed out ({type(e).__name__})"
                )
                continue
            except httpx.HTTPError as e:
                raise EngineError(f"request to {self.origin} failed: {_why(e)}") from e
            if resp.status_code < 400:
                return resp
            text = error_message(await resp.aread())
            await resp.aclose()
            status = resp.status_code
            if status in _RETRY_STATUS:
                last = EngineError(f"the server {self.origin} answered HTTP {status}: {text}")
                continue
            if status == 404 and path == "/completions":
                raise NoCompletions(text)
            if status < 500:
                raise EngineRequestError(
                    f"the server {self.origin} rejected the request (HTTP {status}): {text}"
                )
            raise EngineError(f"the server {self.origin} failed (HTTP {status}): {text}")
        if last is None or isinstance(last, EngineUnavailable):
            raise last or EngineUnavailable(f"cannot reach {self.origin}")
        raise EngineError(f"{last} (after {self._retries + 1} attempts)")


def _why(e: BaseException) -> str:
    """The short cause of a transport error: "connection refused" rather than a trace."""
    text = str(e) or type(e).__name__
    cause: BaseException | None = e
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError) or "refused" in str(cause).lower():
            return "connection refused"
        cause = cause.__cause__ or cause.__context__
    return text.splitlines()[0]
