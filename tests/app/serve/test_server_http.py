"""ChatServer over real HTTP on loopback (and a unix socket), in process, with the scripted
engine behind it and both httpx and our own RemoteEngine as clients."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from m3agent.app.serve.http import start
from m3agent.app.serve.server import ChatServer, ServeConfig
from m3agent.engine.api import (
    ChatRequest,
    ContentDelta,
    Message,
    ReasoningDelta,
    SamplingParams,
    ToolCallDelta,
    UsageDelta,
)
from m3agent.engine.backends.remote import RemoteEngine
from m3agent.engine.backends.scripted import ScriptedEngine

from ...support.markup import SYSTEM, calls, function_tool, invoke

TOOL = function_tool("grep", "search", required=("pattern",), pattern="string")
CALL = calls(invoke("grep", pattern="TODO"), reasoning="looking")


async def serving(engine, tmp_path: Path, *, socket_path: str | None = None):
    app = ChatServer(engine, ServeConfig("tiny", tmp_path / "media", aliases=("/models/tiny",)))
    server = await start(app.handle, port=0, socket_path=socket_path)
    port = None if socket_path else server.sockets[0].getsockname()[1]
    return server, port


async def aborted(engine: ScriptedEngine) -> bool:
    """Whether the engine saw an abort within two seconds."""
    for _ in range(200):
        if engine._aborted:  # noqa: SLF001 - the engine's own record of aborts
            return True
        await asyncio.sleep(0.01)
    return False


def body(**kw):
    b = {
        "model": "tiny",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "find todos"},
        ],
    }
    b.update(kw)
    return b


def test_remote_engine_round_trip_with_tool_call_and_cached_tokens(tmp_path):
    engine = ScriptedEngine([CALL, "</mm:think>done"], chunk_chars=5)

    async def main():
        server, port = await serving(engine, tmp_path)
        client = RemoteEngine(f"http://127.0.0.1:{port}/v1", "tiny", retries=0)
        msgs = (Message("system", SYSTEM), Message("user", "find todos"))
        try:
            outs = []
            for i in range(2):
                req = ChatRequest(
                    f"r{i}",
                    msgs,
                    tools=(TOOL,),
                    thinking_mode="enabled",
                    sampling=SamplingParams(max_tokens=32),
                )
                outs.append([d async for d in client.stream(req)])
            return outs
        finally:
            await client.close()
            server.close()

    first, second = asyncio.run(main())
    assert "".join(d.text for d in first if isinstance(d, ReasoningDelta)) == "looking"
    calls = [d.call for d in first if isinstance(d, ToolCallDelta)]
    assert [(c.name, c.arguments) for c in calls] == [("grep", {"pattern": "TODO"})]
    assert first[-1].finish_reason == "tool_calls"
    assert "".join(d.text for d in second if isinstance(d, ContentDelta)) == "done"
    u1, u2 = first[-1].usage, second[-1].usage
    assert isinstance(second[-1], UsageDelta)
    assert u1.cached_prompt_tokens == 0 and u2.cached_prompt_tokens >= 128
    assert u2.prompt_tokens == u1.prompt_tokens == len(engine.prompt_token_ids[0])
    # thinking mode arrived through chat_template_kwargs and reached the renderer
    assert engine.prompts[0].endswith("<mm:think>")


def test_non_streaming_models_and_errors(tmp_path):
    engine = ScriptedEngine(["</mm:think>plain answer"])

    async def main():
        server, port = await serving(engine, tmp_path)
        base = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=base) as c:
                models = (await c.get("/v1/models")).json()
                ok = (
                    await c.post(
                        "/v1/chat/completions",
                        json=body(chat_template_kwargs={"thinking_mode": "disabled"}),
                    )
                ).json()
                bad_mode = await c.post(
                    "/v1/chat/completions",
                    json=body(chat_template_kwargs={"thinking_mode": "sometimes"}),
                )
                wrong_model = await c.post("/v1/chat/completions", json=body(model="other"))
                alias = await c.post("/v1/chat/completions", json=body(model="/models/tiny"))
                broken = await c.post("/v1/chat/completions", content=b"{not json")
                health = (await c.get("/health")).json()
                missing = await c.get("/v2/nothing")
            return models, ok, bad_mode, wrong_model, alias, broken, health, missing
        finally:
            server.close()

    models, ok, bad_mode, wrong_model, alias, broken, health, missing = asyncio.run(main())
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert ok["choices"][0]["message"]["content"] == "plain answer"
    assert ok["choices"][0]["finish_reason"] == "stop"
    assert ok["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert ok["usage"]["prompt_tokens"] > 100
    assert engine.prompts[0].endswith("</mm:think>")  # disabled
    assert bad_mode.status_code == 400 and "thinking_mode" in bad_mode.json()["error"]["message"]
    assert wrong_model.status_code == 404 and "'other'" in wrong_model.json()["error"]["message"]
    # the alias got past the model check and only failed because the script ran out
    assert alias.status_code == 400 and "no reply left" in alias.json()["error"]["message"]
    assert broken.status_code == 400
    assert health["status"] == "ok" and health["backend"] == "scripted"
    assert missing.status_code == 404


def test_unix_socket(tmp_path):
    engine = ScriptedEngine(["</mm:think>over a socket"])
    sock = str(tmp_path / "m3.sock")

    async def main():
        server, _ = await serving(engine, tmp_path, socket_path=sock)
        try:
            transport = httpx.AsyncHTTPTransport(uds=sock)
            async with httpx.AsyncClient(transport=transport, base_url="http://m3") as c:
                r = await c.post(
                    "/v1/chat/completions",
                    json=body(stream=True, stream_options={"include_usage": True}),
                )
                return r.status_code, r.text
        finally:
            server.close()

    status, text = asyncio.run(main())
    assert status == 200
    events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert content == "over a socket"
    assert chunks[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_client_leaving_mid_stream_aborts_the_engine_request(tmp_path):
    engine = ScriptedEngine(["</mm:think>" + "token " * 2000], chunk_chars=1, chunk_delay_s=0.002)

    async def main():
        server, port = await serving(engine, tmp_path)
        try:
            async with httpx.AsyncClient() as c:
                async with c.stream(
                    "POST", f"http://127.0.0.1:{port}/v1/chat/completions", json=body(stream=True)
                ) as r:
                    async for line in r.aiter_lines():
                        if '"content": "t' in line:
                            break  # leave after the first words
            return await aborted(engine)
        finally:
            server.close()

    assert asyncio.run(main()) is True
    # the request never ran to its end (the engine counts only finished requests)
    assert engine.stats().requests == 0


@pytest.mark.parametrize("payload", [b'{"messages": []}', b'{"model": "tiny"}'])
def test_empty_or_missing_messages_are_400(tmp_path, payload):
    async def main():
        server, port = await serving(ScriptedEngine([]), tmp_path)
        try:
            async with httpx.AsyncClient() as c:
                return await c.post(f"http://127.0.0.1:{port}/v1/chat/completions", content=payload)
        finally:
            server.close()

    r = asyncio.run(main())
    assert r.status_code == 400 and "messages" in r.json()["error"]["message"]


def test_client_leaving_a_non_streaming_request_aborts_it(tmp_path):
    engine = ScriptedEngine(["</mm:think>" + "token " * 2000], chunk_chars=1, chunk_delay_s=0.002)

    async def main():
        server, port = await serving(engine, tmp_path)
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(0.3)) as c:
                with pytest.raises(httpx.ReadTimeout):  # the client gives up and hangs up
                    await c.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body())
            return await aborted(engine)
        finally:
            server.close()

    assert asyncio.run(main()) is True
    assert engine.stats().requests == 0


def test_a_stream_refused_at_once_is_an_http_error(tmp_path):
    async def main():
        server, port = await serving(ScriptedEngine([]), tmp_path)  # no reply: refused at once
        try:
            async with httpx.AsyncClient() as c:
                return await c.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions", json=body(stream=True)
                )
        finally:
            server.close()

    r = asyncio.run(main())
    assert r.status_code == 400 and "no reply left" in r.json()["error"]["message"]


def test_keep_alive_and_access_log(tmp_path):
    """Two requests on one kept-alive connection (one peer port in the access log); a
    streamed response closes its connection; each request is one log line."""
    import io

    engine = ScriptedEngine(["</mm:think>one", "</mm:think>two", "</mm:think>three"])
    log = io.StringIO()

    async def main():
        app = ChatServer(engine, ServeConfig("tiny", tmp_path / "media"))
        server = await start(app.handle, port=0, access_log=log)
        port = server.sockets[0].getsockname()[1]
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
                a = await c.post("/v1/chat/completions", json=body())
                b = await c.post("/v1/chat/completions", json=body())
                s = await c.post("/v1/chat/completions", json=body(stream=True))
                m = await c.get("/v1/models/nope")
            return a, b, s, m
        finally:
            server.close()
            await server.wait_closed()

    a, b, s, m = asyncio.run(main())
    assert a.headers["connection"] == "keep-alive" and b.status_code == 200
    assert s.headers["connection"] == "close" and s.text.rstrip().endswith("[DONE]")
    lines = log.getvalue().splitlines()
    assert len(lines) == 4 and all('"POST /v1/chat/completions" 200' in x for x in lines[:3])
    assert '"GET /v1/models/nope" 404' in lines[3]
    assert lines[0].split()[0] == lines[1].split()[0]  # the same client port: one connection
