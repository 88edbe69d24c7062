"""RemoteEngine against a real HTTP server on 127.0.0.1 (see conftest.py)."""

from __future__ import annotations

import asyncio

import pytest
from m3agent.engine.api import (
    ChatRequest,
    ContentDelta,
    EngineError,
    EngineProtocolError,
    EngineRequestError,
    EngineUnavailable,
    Message,
    ReasoningDelta,
    ToolCall,
    ToolCallDelta,
    UsageDelta,
)
from m3agent.engine.backends.remote import RemoteEngine

from ...support.conversation import tool_round

NS = "]<]minimax[>["
SHELL = {
    "type": "function",
    "function": {
        "name": "run_shell",
        "description": "run a command",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            "required": ["command"],
        },
    },
}


def request(mode="adaptive", messages=None, rid="r1"):
    msgs = messages or (Message("system", "be brief"), Message("user", "list files"))
    return ChatRequest(rid, tuple(msgs), tools=(SHELL,), thinking_mode=mode)


async def collect(engine, req):
    out = []
    async for d in engine.stream(req):
        out.append(d)
    return out


def text_of(deltas, kind):
    return "".join(d.text for d in deltas if isinstance(d, kind))


def run(coro):
    return asyncio.run(coro)


def test_streams_reasoning_content_tool_calls_and_cached_usage(server, wire):
    c = wire.chunk
    server.replies.append(
        wire.Reply(
            chunks=wire.sse(
                c({"role": "assistant", "reasoning_content": "I need "}),
                c({"reasoning_content": "the listing."}),
                c({"content": "Checking"}),
                c({"content": " now."}),
                c(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call-a",
                                "type": "function",
                                "function": {"name": "run_shell", "arguments": ""},
                            }
                        ]
                    }
                ),
                c({"tool_calls": [{"index": 0, "function": {"arguments": '{"command": "ls'}}]}),
                c(
                    {
                        "tool_calls": [
                            {"index": 0, "function": {"arguments": ' -la", "timeout": 5}'}}
                        ]
                    }
                ),
                c(
                    {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "call-b",
                                "type": "function",
                                "function": {
                                    "name": "run_shell",
                                    "arguments": '{"command": "pwd"}',
                                },
                            }
                        ]
                    }
                ),
                c({}, finish="tool_calls"),
                c(
                    usage={
                        "prompt_tokens": 1000,
                        "completion_tokens": 42,
                        "total_tokens": 1042,
                        "prompt_tokens_details": {"cached_tokens": 896},
                    }
                ),
            )
        )
    )
    history = (
        Message("system", "be brief"),
        *tool_round(
            "hi",
            ToolCall("c0", "run_shell", {"command": "ls"}),
            "a.py",
            reasoning="think",
        ),
        Message("user", "again"),
    )
    engine = RemoteEngine(server.url, "m3", api_key="sk-test", retries=0)
    deltas = run(collect(engine, request("enabled", history)))
    assert text_of(deltas, ReasoningDelta) == "I need the listing."
    assert text_of(deltas, ContentDelta) == "Checking now."
    calls = [d for d in deltas if isinstance(d, ToolCallDelta)]
    assert [(d.index, d.call) for d in calls] == [
        (0, ToolCall("call-a", "run_shell", {"command": "ls -la", "timeout": 5})),
        (1, ToolCall("call-b", "run_shell", {"command": "pwd"})),
    ]
    last = deltas[-1]
    assert isinstance(last, UsageDelta) and last.finish_reason == "tool_calls"
    assert (last.usage.prompt_tokens, last.usage.cached_prompt_tokens) == (1000, 896)
    assert last.usage.generated_tokens == 42
    assert engine.stats().cached_prompt_tokens == 896

    body = server.requests[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["chat_template_kwargs"] == {"thinking_mode": "enabled"}
    assert body["model"] == "m3" and body["tools"] == [SHELL]
    assert body["messages"][2] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "think",
        "tool_calls": [
            {
                "id": "c0",
                "type": "function",
                "function": {"name": "run_shell", "arguments": '{"command": "ls"}'},
            }
        ],
    }
    assert body["messages"][3] == {
        "role": "tool",
        "content": "a.py",
        "tool_call_id": "c0",
        "name": "run_shell",
    }
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def test_markup_left_in_content_is_reparsed(server, wire):
    # A server whose reasoning parser decided "reasoning already ended" (SPEC Addendum): the
    # think block and the tool markup arrive as plain content.
    text = (
        "<mm:think>plan it</mm:think>Running."
        f'{NS}<tool_call>\n{NS}<invoke name="run_shell">{NS}<command>ls{NS}</command>'
        f"{NS}<timeout>30{NS}</timeout>{NS}</invoke>\n{NS}</tool_call>"
    )
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
    server.replies.append(
        wire.Reply(
            chunks=wire.sse(
                *[wire.chunk({"content": p}) for p in pieces], wire.chunk({}, finish="stop")
            )
        )
    )
    engine = RemoteEngine(server.url, "m3", retries=0)
    deltas = run(collect(engine, request("adaptive")))
    assert text_of(deltas, ReasoningDelta) == "plan it"
    assert text_of(deltas, ContentDelta) == "Running."
    calls = [d.call for d in deltas if isinstance(d, ToolCallDelta)]
    assert [(c.name, c.arguments) for c in calls] == [
        ("run_shell", {"command": "ls", "timeout": 30})
    ]
    assert deltas[-1].finish_reason == "tool_calls"


def test_enabled_mode_without_server_reasoning_parser(server, wire):
    server.replies.append(
        wire.Reply(
            chunks=wire.sse(
                wire.chunk({"content": "think hard</mm:"}),
                wire.chunk({"content": "think>The answer."}),
                wire.chunk({}, finish="stop"),
            )
        )
    )
    deltas = run(collect(RemoteEngine(server.url, "m3", retries=0), request("enabled")))
    assert text_of(deltas, ReasoningDelta) == "think hard"
    assert text_of(deltas, ContentDelta) == "The answer."


def test_http_500_is_an_engine_error_with_the_servers_message(server, wire):
    server.replies.append(
        wire.Reply(
            500, [b'{"error": {"message": "CUDA out of memory"}}'], content_type="application/json"
        )
    )
    with pytest.raises(EngineError) as ei:
        run(collect(RemoteEngine(server.url, "m3", retries=2, backoff_s=0.01), request()))
    assert not isinstance(ei.value, EngineRequestError | EngineUnavailable)
    assert "HTTP 500" in str(ei.value) and "CUDA out of memory" in str(ei.value)
    assert len(server.requests) == 1  # a plain 500 is not retried


def test_503_is_retried_then_succeeds(server, wire):
    server.replies.append(wire.Reply(503, [b"warming up"], content_type="text/plain"))
    server.replies.append(wire.Reply(503, [b"warming up"], content_type="text/plain"))
    server.replies.append(
        wire.Reply(chunks=wire.sse(wire.chunk({"content": "ok"}), wire.chunk({}, finish="stop")))
    )
    deltas = run(collect(RemoteEngine(server.url, "m3", retries=2, backoff_s=0.01), request()))
    assert text_of(deltas, ContentDelta) == "ok"
    assert len(server.requests) == 3


def test_503_after_all_retries(server, wire):
    for _ in range(3):
        server.replies.append(wire.Reply(503, [b"overloaded"], content_type="text/plain"))
    with pytest.raises(EngineError, match=r"HTTP 503: overloaded \(after 3 attempts\)"):
        run(collect(RemoteEngine(server.url, "m3", retries=2, backoff_s=0.01), request()))


def test_4xx_is_a_request_error_with_the_servers_message(server, wire):
    server.replies.append(
        wire.Reply(
            400,
            [
                b'{"object": "error", "message": "This model\'s maximum context length is 8192 tokens"}'
            ],
            content_type="application/json",
        )
    )
    with pytest.raises(EngineRequestError, match="maximum context length is 8192"):
        run(collect(RemoteEngine(server.url, "m3", retries=3, backoff_s=0.01), request()))
    assert len(server.requests) == 1


def test_refused_connection(wire):
    port = wire.free_port()
    engine = RemoteEngine(f"http://127.0.0.1:{port}/v1", "m3", retries=1, backoff_s=0.01)
    with pytest.raises(EngineUnavailable) as ei:
        run(collect(engine, request()))
    assert str(ei.value) == f"cannot reach http://127.0.0.1:{port}: connection refused"


def test_broken_stream(server, wire):
    chunks = wire.sse(
        *[wire.chunk({"content": f"part{i} "}) for i in range(6)], wire.chunk({}, finish="stop")
    )
    server.replies.append(wire.Reply(chunks=chunks, cut=True))
    seen = []

    async def go():
        async for d in RemoteEngine(server.url, "m3", retries=0).stream(request()):
            seen.append(d)

    with pytest.raises(EngineProtocolError, match="broke"):
        run(go())
    assert text_of(seen, ContentDelta).startswith("part0 ")  # what came before the break


def test_stream_ending_early_without_done(server, wire):
    server.replies.append(wire.Reply(chunks=wire.sse(wire.chunk({"content": "half"}), done=False)))
    with pytest.raises(EngineProtocolError, match="ended before the response was complete"):
        run(collect(RemoteEngine(server.url, "m3", retries=0), request()))


def test_malformed_json_in_stream(server, wire):
    server.replies.append(wire.Reply(chunks=[b'data: {"choices": [\n\n', b"data: [DONE]\n\n"]))
    with pytest.raises(EngineProtocolError, match="malformed stream"):
        run(collect(RemoteEngine(server.url, "m3", retries=0), request()))


def test_abort_closes_the_stream(server, wire):
    chunks = wire.sse(
        *[wire.chunk({"content": f"w{i} "}) for i in range(200)], wire.chunk({}, finish="stop")
    )
    server.replies.append(wire.Reply(chunks=chunks, delay_s=0.02))
    engine = RemoteEngine(server.url, "m3", retries=0)

    async def go():
        out = []
        async for d in engine.stream(request(rid="abort-me")):
            out.append(d)
            if len(out) == 3:
                await engine.abort("abort-me")
        return out

    deltas = run(go())
    assert isinstance(deltas[-1], UsageDelta) and deltas[-1].finish_reason == "abort"
    assert len([d for d in deltas if isinstance(d, ContentDelta)]) < 50
    assert server.disconnected.wait(5.0)  # the server saw the connection go away


def test_bad_base_url():
    with pytest.raises(ValueError, match="not an http"):
        RemoteEngine("ftp://x", "m3")


def test_image_goes_as_a_data_url_content_part(server, wire, tmp_path):
    from m3agent.engine.api import MediaPart
    from PIL import Image

    img = tmp_path / "red.png"
    Image.new("RGB", (64, 48), (255, 0, 0)).save(img)
    server.replies.append(
        wire.Reply(chunks=wire.sse(wire.chunk({"content": "red"}), wire.chunk({}, finish="stop")))
    )
    msgs = (Message("user", "colour?", media=(MediaPart("image", str(img)),)),)
    deltas = run(collect(RemoteEngine(server.url, "m3", retries=0), request(messages=msgs)))
    assert text_of(deltas, ContentDelta) == "red"
    content = server.requests[0]["messages"][0]["content"]
    assert content[0]["type"] == "image_url"
    assert content[0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert content[1] == {"type": "text", "text": "colour?"}


def test_missing_image_is_a_request_error(tmp_path):
    from m3agent.engine.api import MediaPart

    msgs = (Message("user", "x", media=(MediaPart("image", str(tmp_path / "no.png")),)),)
    with pytest.raises(EngineRequestError, match="no.png"):
        run(collect(RemoteEngine("http://127.0.0.1:9/v1", "m3", retries=0), request(messages=msgs)))


def test_a_silent_server_times_out_with_a_clear_error(server, wire):
    chunks = wire.sse(
        wire.chunk({"content": "a"}), wire.chunk({"content": "b"}), wire.chunk({}, finish="stop")
    )
    server.replies.append(wire.Reply(chunks=chunks, delay_s=1.5))
    engine = RemoteEngine(server.url, "m3", retries=0, timeout=0.5)
    with pytest.raises(EngineError, match=r"sent nothing for 0.5s"):
        run(collect(engine, request()))


@pytest.mark.parametrize("send_raw_text", [False, True])
def test_raw_text_is_sent_only_to_m3agent_serve(server, wire, send_raw_text):
    # `m3agent serve` renders the model's exact output verbatim (no recompute of history); a
    # plain OpenAI server must not receive a field it does not know.
    history = (
        Message("user", "list files"),
        Message("assistant", "ok", raw_text="<mm:think>x</mm:think>ok", thinking_mode="adaptive"),
        Message("user", "again"),
    )
    server.replies.append(
        wire.Reply(chunks=wire.sse(wire.chunk({"content": "fine"}), wire.chunk({}, finish="stop")))
    )
    engine = RemoteEngine(server.url, "m3", retries=0, send_raw_text=send_raw_text)
    run(collect(engine, request(messages=history)))
    sent = server.requests[-1]["messages"][1]
    assert sent["content"] == "ok"
    assert sent.get("raw_text") == ("<mm:think>x</mm:think>ok" if send_raw_text else None)
