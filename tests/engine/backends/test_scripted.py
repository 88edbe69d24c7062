"""ScriptedEngine: real renderer + tokenizer + parsers over recorded model text."""

from __future__ import annotations

import asyncio
import json

import pytest
from m3agent.engine.api import (
    ChatRequest,
    ContentDelta,
    EngineRequestError,
    Message,
    ReasoningDelta,
    ToolCallDelta,
    UsageDelta,
)
from m3agent.engine.backends.scripted import PAGE_TOKENS, ScriptedEngine, load_script
from m3agent.engine.m3.tokenizer import M3Tokenizer

from ...support.markup import calls, function_tool, invoke

TOOL = function_tool("shell", "run", timeout="integer")


async def collect(engine, req):
    return [d async for d in engine.stream(req)]


def test_replays_through_the_parsers_with_token_counts():
    text = calls(invoke("shell", timeout="5"), before="Go.", reasoning="plan")
    engine = ScriptedEngine([text, "</mm:think>Done."], chunk_chars=3)
    msgs = [Message("system", "s"), Message("user", "u " * 300)]
    req = ChatRequest("a", tuple(msgs), tools=(TOOL,), thinking_mode="enabled")
    d1 = asyncio.run(collect(engine, req))
    assert "".join(d.text for d in d1 if isinstance(d, ReasoningDelta)) == "plan"
    assert "".join(d.text for d in d1 if isinstance(d, ContentDelta)) == "Go."
    [call] = [d.call for d in d1 if isinstance(d, ToolCallDelta)]
    assert (call.name, call.arguments) == ("shell", {"timeout": 5})  # typed by the schema
    u1 = d1[-1]
    assert isinstance(u1, UsageDelta) and u1.finish_reason == "tool_calls" and u1.raw_text == text
    tok = M3Tokenizer.default()
    assert u1.usage.prompt_tokens == len(engine.prompt_token_ids[0]) > 0
    assert u1.usage.generated_tokens == len(tok.encode_model(text))  # its markers as tokens
    assert u1.usage.cached_prompt_tokens == 0

    follow = (
        *msgs,
        Message(
            "assistant",
            "Go.",
            reasoning="plan",
            tool_calls=(call,),
            thinking_mode="enabled",
            raw_text=text,
        ),
        Message("tool", "ok", tool_call_id=call.id, name="shell"),
    )
    d2 = asyncio.run(
        collect(engine, ChatRequest("b", follow, tools=(TOOL,), thinking_mode="enabled"))
    )
    u2 = d2[-1].usage
    first = engine.prompt_token_ids[0]
    assert engine.prompt_token_ids[1][: len(first)] == first
    # Cached = the shared prefix, whole 128-token pages only.
    assert u2.cached_prompt_tokens == len(first) // PAGE_TOKENS * PAGE_TOKENS > 0
    assert d2[-1].finish_reason == "stop"

    with pytest.raises(EngineRequestError, match="no reply left for engine call 3"):
        asyncio.run(collect(engine, req))
    assert engine.stats().requests == 2


def test_load_script_validates(tmp_path):
    good = tmp_path / "s.json"
    good.write_text(json.dumps(["a", "b"]))
    assert load_script(good) == ["a", "b"]
    bad = tmp_path / "bad.json"
    bad.write_text('{"a": 1}')
    with pytest.raises(ValueError, match="JSON array of strings"):
        load_script(bad)
    bad.write_text("[1,")
    with pytest.raises(ValueError, match="script: .*bad.json is not valid JSON"):
        load_script(bad)
    with pytest.raises(ValueError, match="script: .*missing.json does not exist"):
        load_script(tmp_path / "missing.json")
