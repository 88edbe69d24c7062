"""RemoteEngine's own rendering: /v1/completions on vLLM-like servers (told by /v1/models),
the chat endpoint for other servers, after a 404, and for turns with media. Against real HTTP
servers on 127.0.0.1: the recording OpenAI server of conftest.py and a real `m3agent serve`."""

from __future__ import annotations

import asyncio
import json

from m3agent.engine.api import (
    ChatRequest,
    ContentDelta,
    MediaPart,
    Message,
    ReasoningDelta,
    ToolCallDelta,
    UsageDelta,
)
from m3agent.engine.backends.remote import RemoteEngine
from m3agent.engine.backends.scripted import ScriptedEngine
from m3agent.engine.m3.chat_template import ChatTemplate
from m3agent.engine.m3.tokenizer import M3Tokenizer
from PIL import Image

from ...support.markup import SYSTEM, calls, function_tool, invoke
from ...support.serving import serve_and_run

TOOL = function_tool("grep", "search", required=("pattern",), pattern="string")
CALL = calls(invoke("grep", pattern="TODO"), before="Searching.\n", reasoning="looking")


def req(rid: str, mode: str, messages=None, media=()) -> ChatRequest:
    msgs = messages or (
        Message("system", SYSTEM),
        Message("user", "find todos", media=tuple(media)),
    )
    return ChatRequest(rid, tuple(msgs), tools=(TOOL,), thinking_mode=mode)


async def collect(engine, r):
    return [d async for d in engine.stream(r)]


def test_renders_itself_sends_ids_and_parses_with_our_parsers(tmp_path):
    scripted = ScriptedEngine([CALL, "</mm:think>done"], chunk_chars=5)
    tok = M3Tokenizer.default()

    async def main(url):
        remote = RemoteEngine(url, "tiny", retries=0, tokenizer=tok)
        try:
            first = await collect(remote, req("a", "enabled"))
            history = (
                Message("system", SYSTEM),
                Message("user", "find todos"),
                Message("assistant", "", raw_text=first[-1].raw_text, thinking_mode="enabled"),
                Message("user", "thanks"),
            )
            second = await collect(remote, req("b", "disabled", history))
            return remote, first, second
        finally:
            await remote.close()

    remote, first, second = serve_and_run(scripted, tmp_path, main)
    assert remote._completions is True  # /v1/models said owned_by m3agent
    assert "".join(d.text for d in first if isinstance(d, ReasoningDelta)) == "looking"
    assert [d.call.name for d in first if isinstance(d, ToolCallDelta)] == ["grep"]
    assert first[-1].finish_reason == "tool_calls" and first[-1].raw_text == CALL
    # The ids the server got are exactly our rendering, run by run.
    expected = list(ChatLayerIds(tok)(req("a", "enabled")))
    assert scripted.prompt_token_ids[0] == expected
    # The toggle (enabled -> disabled) kept every earlier token: the second prompt starts
    # with the first prompt plus the model's output.
    p0, p1 = scripted.prompt_token_ids
    assert p1[: len(p0)] == p0
    u = second[-1].usage
    assert u.cached_prompt_tokens >= len(p0) // 128 * 128
    assert "".join(d.text for d in second if isinstance(d, ContentDelta)) == "done"


class ChatLayerIds:
    def __init__(self, tok):
        from m3agent.engine.m3.chat import ChatLayer

        self.layer = ChatLayer(tok, ChatTemplate())

    def __call__(self, r):
        return self.layer.render(r).token_ids


def test_without_a_tokenizer_the_prompt_goes_as_text(tmp_path):
    scripted = ScriptedEngine(["</mm:think>ok"])

    async def main(url):
        remote = RemoteEngine(url, "tiny", retries=0)
        try:
            return await collect(remote, req("a", "disabled"))
        finally:
            await remote.close()

    out = serve_and_run(scripted, tmp_path, main)
    assert "".join(d.text for d in out if isinstance(d, ContentDelta)) == "ok"
    assert scripted.prompts[0].endswith("]~b]ai\n</mm:think>")


def test_media_turns_use_the_chat_endpoint(tmp_path):
    scripted = ScriptedEngine(["</mm:think>a red square"])
    img = tmp_path / "red.png"
    Image.new("RGB", (56, 56), (255, 0, 0)).save(img)

    async def main(url):
        remote = RemoteEngine(url, "tiny", retries=0, tokenizer=M3Tokenizer.default())
        try:
            return await collect(remote, req("m", "disabled", media=[MediaPart("image", str(img))]))
        finally:
            await remote.close()

    out = serve_and_run(scripted, tmp_path, main)
    assert "".join(d.text for d in out if isinstance(d, ContentDelta)) == "a red square"
    assert "]<]image[>[" in scripted.prompts[0]  # rendered by the server from messages


def sse_completion(*texts: str, finish: str = "stop") -> list[bytes]:
    objs = [
        {"object": "text_completion", "choices": [{"index": 0, "text": t, "finish_reason": None}]}
        for t in texts
    ]
    objs.append(
        {
            "object": "text_completion",
            "choices": [{"index": 0, "text": "", "finish_reason": finish}],
        }
    )
    objs.append(
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 300,
                "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 256},
            },
        }
    )
    return [f"data: {json.dumps(o)}\n\n".encode() for o in objs] + [b"data: [DONE]\n\n"]


def test_other_servers_get_the_chat_endpoint(server, wire):
    """No /v1/models saying vLLM or m3agent: chat completions, as before."""
    server.replies.append(
        wire.Reply(chunks=wire.sse(wire.chunk({"content": "hi"}), wire.chunk(finish="stop")))
    )

    async def main():
        remote = RemoteEngine(server.url, "m", retries=0)
        try:
            return remote, await collect(remote, req("o", "adaptive"))
        finally:
            await remote.close()

    remote, out = asyncio.run(main())
    assert remote._completions is False
    assert "messages" in server.requests[0] and "prompt" not in server.requests[0]


def test_a_404_on_completions_falls_back_to_chat_once(server, wire):
    server.replies += [
        wire.Reply(404, [b'{"error": {"message": "Not Found"}}'], content_type="application/json"),
        wire.Reply(chunks=wire.sse(wire.chunk({"content": "via chat"}), wire.chunk(finish="stop"))),
        wire.Reply(chunks=wire.sse(wire.chunk({"content": "again"}), wire.chunk(finish="stop"))),
    ]

    async def main():
        remote = RemoteEngine(server.url, "m", retries=0, completions=True)
        try:
            first = await collect(remote, req("x", "disabled"))
            second = await collect(remote, req("y", "disabled"))
            return first, second
        finally:
            await remote.close()

    first, second = asyncio.run(main())
    assert "".join(d.text for d in first if isinstance(d, ContentDelta)) == "via chat"
    assert "".join(d.text for d in second if isinstance(d, ContentDelta)) == "again"
    kinds = ["prompt" if "prompt" in r else "messages" for r in server.requests]
    assert kinds == ["prompt", "messages", "messages"]


def test_completion_stream_is_parsed_and_counted(server, wire):
    server.replies.append(wire.Reply(chunks=sse_completion("</mm:think>", "all ", "done")))
    server.replies.append(
        wire.Reply(chunks=sse_completion("</mm:think>again " * 3, finish="repetition"))
    )

    async def main():
        remote = RemoteEngine(
            server.url, "m", retries=0, completions=True, tokenizer=M3Tokenizer.default()
        )
        try:
            return (
                remote,
                await collect(remote, req("c", "disabled")),
                await collect(remote, req("d", "disabled")),
            )
        finally:
            await remote.close()

    remote, out, looped = asyncio.run(main())
    assert "".join(d.text for d in out if isinstance(d, ContentDelta)) == "all done"
    last = out[-1]
    assert isinstance(last, UsageDelta) and last.finish_reason == "stop"
    assert (last.usage.prompt_tokens, last.usage.cached_prompt_tokens) == (300, 256)
    assert last.raw_text == "</mm:think>all done"
    assert looped[-1].finish_reason == "repetition"
    assert remote.stats().requests == 2 and remote.stats().cached_prompt_tokens == 512
    body = server.requests[0]
    assert isinstance(body["prompt"], list) and body["skip_special_tokens"] is False
    assert body["stream_options"] == {"include_usage": True}


def test_abort_mid_completion_ends_with_abort_and_stops_the_server(tmp_path):
    scripted = ScriptedEngine(["</mm:think>" + "word " * 300], chunk_chars=2, chunk_delay_s=0.01)

    async def main(url):
        remote = RemoteEngine(url, "tiny", retries=0, tokenizer=M3Tokenizer.default())
        out = []
        try:
            async for d in remote.stream(req("ab", "disabled")):
                out.append(d)
                if len(out) == 3:
                    await remote.abort("ab")
            await asyncio.sleep(0.3)  # the server notices the closed connection
            return out
        finally:
            await remote.close()

    out = serve_and_run(scripted, tmp_path, main)
    assert isinstance(out[-1], UsageDelta) and out[-1].finish_reason == "abort"
    assert len(out) < 50  # it stopped long before the 1500 characters
    # The server saw the connection close and closed its engine stream before the end (a
    # stream that never finished is not counted in the engine's stats).
    assert scripted.stats().requests == 0
