"""`m3agent serve` on 127.0.0.1 through the official `openai` SDK: /v1/completions (text and
token-id prompts, streaming with usage), /v1/chat/completions, /v1/models/{id}, and the
parameters it does not implement answered 400 with a clear message."""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai
import pytest
from m3agent.engine.backends.scripted import ScriptedEngine
from m3agent.engine.m3.tokenizer import M3Tokenizer

from ...support.markup import SYSTEM, calls, function_tool, invoke
from ...support.serving import chat_server


def run(engine, tmp_path: Path, client_main):
    async def main():
        async with chat_server(engine, tmp_path / "media") as url:
            client = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0)
            try:
                return await client_main(client)
            finally:
                await client.close()

    return asyncio.run(main())


def test_completions_text_then_ids_streaming_with_cached_usage(tmp_path):
    raw = "<mm:think>plan</mm:think>answer"
    engine = ScriptedEngine([raw, raw], chunk_chars=4)
    prompt = f"]~!b[]~b]system\n{SYSTEM}[e~[\n]~b]user\nhi[e~[\n]~b]ai\n"
    ids = M3Tokenizer.default().encode(prompt)

    async def main(client):
        first = await client.completions.create(model="tiny", prompt=prompt, max_tokens=32)
        chunks = [
            c
            async for c in await client.completions.create(
                model="tiny",
                prompt=ids,
                max_tokens=32,
                stream=True,
                stream_options={"include_usage": True},
            )
        ]
        return first, chunks

    first, chunks = run(engine, tmp_path, main)
    assert first.object == "text_completion"
    assert first.choices[0].text == raw  # raw: the client parses it
    assert first.choices[0].finish_reason == "stop"
    assert first.usage.prompt_tokens == len(ids)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == raw
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    usage = chunks[-1].usage
    assert usage.prompt_tokens == len(ids) and usage.prompt_tokens_details.cached_tokens >= 128
    assert engine.prompt_token_ids[1] == ids  # the ids went to the engine as they were


def test_chat_through_the_sdk_parses_and_keeps_markup_out_of_content(tmp_path):
    engine = ScriptedEngine(["looked]~b]</mm:think>The answer[e~[ is 4."], chunk_chars=3)

    async def main(client):
        return await client.chat.completions.create(
            model="tiny",
            max_tokens=32,
            messages=[{"role": "user", "content": "2+2?"}],
            extra_body={"chat_template_kwargs": {"thinking_mode": "enabled"}},
        )

    out = run(engine, tmp_path, main)
    msg = out.choices[0].message
    assert msg.content == "The answer is 4."
    assert msg.model_extra["reasoning_content"] == "looked"


def test_models_retrieve(tmp_path):
    async def main(client):
        card = await client.models.retrieve("tiny")
        with pytest.raises(openai.NotFoundError, match="not served here"):
            await client.models.retrieve("other")
        return card

    card = run(ScriptedEngine([]), tmp_path, main)
    assert card.id == "tiny" and card.owned_by == "m3agent"


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"n": 2}, "n must be 1"),
        ({"logprobs": True}, "logprobs are not supported"),
        ({"response_format": {"type": "json_object"}}, "response_format 'json_object'"),
        ({"tool_choice": "required"}, "tool_choice 'required' is not supported"),
    ],
)
def test_unsupported_chat_parameters_are_400(tmp_path, extra, words):
    async def main(client):
        with pytest.raises(openai.BadRequestError) as e:
            await client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], **extra
            )
        return str(e.value)

    assert words in run(ScriptedEngine(["x"]), tmp_path, main)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"n": 2}, "n must be 1"),
        ({"logprobs": 2}, "logprobs is not supported"),
        ({"echo": True}, "echo is not supported"),
        ({"prompt": ["a", "b"]}, "one prompt per request"),
    ],
)
def test_unsupported_completion_parameters_are_400(tmp_path, extra, words):
    async def main(client):
        kw = {"model": "tiny", "prompt": "hello", **extra}
        with pytest.raises(openai.BadRequestError) as e:
            await client.completions.create(**kw)
        return str(e.value)

    assert words in run(ScriptedEngine(["x"]), tmp_path, main)


TOOL = function_tool("read_file", "Read a file.", required=("path",), path="string")
CALL = calls(invoke("read_file", path="a.py"), before="Reading.")


@pytest.mark.parametrize("choice", ["auto", "none"])
def test_tool_choice_reaches_the_parser(tmp_path, choice):
    """vLLM's rule: with tool_choice "none" the model's markup is content, not a call."""
    engine = ScriptedEngine([CALL], chunk_chars=5)

    async def main(client):
        return await client.chat.completions.create(
            model="tiny",
            max_tokens=64,
            messages=[{"role": "user", "content": "read a.py"}],
            tools=[TOOL],
            tool_choice=choice,
        )

    msg = run(engine, tmp_path, main).choices[0].message
    if choice == "auto":
        assert [c.function.name for c in msg.tool_calls] == ["read_file"]
        assert msg.content == "Reading."
    else:
        assert not msg.tool_calls
        assert msg.content.startswith("Reading.") and "read_file" in msg.content
