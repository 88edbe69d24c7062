"""NativeEngine (the Engine protocol) over a tiny random M3 checkpoint written by the loader's
init-tiny: real weights, real tokenizer, real chat template and M3 parsers."""

from __future__ import annotations

import asyncio

import pytest
from m3agent.engine.api import (
    ChatRequest,
    ContentDelta,
    Engine,
    EngineUnavailable,
    Message,
    PromptTooLong,
    ReasoningDelta,
    SamplingParams,
    ToolCallDelta,
    UsageDelta,
)
from m3agent.engine.backends.native import NativeEngine
from m3agent.engine.backends.scripted import common_prefix_len
from m3agent.engine.m3.chat_template import ChatTemplate, render_prompt
from m3agent.engine.m3.output_parser import parse_output
from m3agent.engine.m3.tokenizer import M3Tokenizer
from m3agent.engine.native.core.engine_config import EngineConfig

from ...support.native import tiny_m3


@pytest.fixture(scope="module")
def tiny_m3_dir(tmp_path_factory):
    return tiny_m3(tmp_path_factory.mktemp("tiny_m3"), seed=3)


def chat(
    rid: str, text: str, max_tokens: int = 12, history: tuple[Message, ...] = ()
) -> ChatRequest:
    return ChatRequest(
        request_id=rid,
        messages=(Message("system", "You are terse."), *history, Message("user", text)),
        thinking_mode="disabled",
        sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0),
    )


async def collect(engine: NativeEngine, request: ChatRequest) -> tuple[list, UsageDelta]:
    deltas = [d async for d in engine.stream(request)]
    assert isinstance(deltas[-1], UsageDelta)
    assert sum(isinstance(d, UsageDelta) for d in deltas) == 1
    return deltas[:-1], deltas[-1]


def on_engine(model_dir, check, **config) -> None:
    """asyncio.run of `await check(engine)` on a NativeEngine over MODEL_DIR with
    EngineConfig(**config), closed afterwards."""

    async def main():
        engine = NativeEngine.from_model_dir(model_dir, config=EngineConfig(**config))
        try:
            await check(engine)
        finally:
            await engine.close()

    asyncio.run(main())


def test_stream_usage_raw_text_and_prefix_cache(tiny_m3_dir):
    async def check(engine):
        assert isinstance(engine, Engine) and engine.info().backend == "native"
        tok = M3Tokenizer.from_model_dir(tiny_m3_dir)
        tmpl = ChatTemplate.from_model_dir(tiny_m3_dir)
        long_text = "Please read this repository summary. " * 40
        deltas, usage = await collect(engine, chat("t1", long_text))
        u = usage.usage
        assert u.cached_prompt_tokens == 0 and u.prompt_tokens > 256
        assert u.generated_tokens >= 1 and u.time_to_first_token_s > 0
        parsed = parse_output(usage.raw_text, [], "disabled")
        text = "".join(d.text for d in deltas if isinstance(d, (ContentDelta, ReasoningDelta)))
        assert text == (parsed.content or "") + (parsed.reasoning or "")
        # Turn 2 extends turn 1's prompt: every full page of it is a hit.
        history = (
            Message("user", long_text),
            Message("assistant", parsed.content or "", raw_text=usage.raw_text),
        )
        turn2 = ChatRequest(
            "t2",
            (Message("system", "You are terse."), *history, Message("user", "And now?")),
            thinking_mode="disabled",
            sampling=SamplingParams(max_tokens=12, temperature=0.0),
        )
        _, usage2 = await collect(engine, turn2)
        p1 = tok.encode(
            render_prompt(chat("t1", long_text).messages, [], "disabled", template=tmpl)
        )
        p2 = tok.encode(render_prompt(turn2.messages, [], "disabled", template=tmpl))
        shared = common_prefix_len(p1, p2)
        assert shared == len(p1)  # the template keeps the prefix-caching contract
        cached = usage2.usage.cached_prompt_tokens
        assert len(p1) // 128 * 128 <= cached <= (len(p1) + u.generated_tokens - 1) // 128 * 128
        assert engine.stats().requests == 2

    on_engine(tiny_m3_dir, check, num_gpu_blocks=64)


def test_concurrent_streams_and_abort(tiny_m3_dir):
    async def check(engine):
        solo = await collect(engine, chat("solo", "hello there", max_tokens=10))

        async def abort_after_first(rid):
            got = []
            async for d in engine.stream(chat(rid, "go on forever", max_tokens=4000)):
                got.append(d)
                if len(got) == 1 and not isinstance(d, UsageDelta):
                    await engine.abort(rid)
            return got

        both = await asyncio.gather(
            collect(engine, chat("again", "hello there", max_tokens=10)),
            abort_after_first("ab"),
        )
        # Greedy output does not depend on what shares the batch.
        assert both[0][1].raw_text == solo[1].raw_text
        aborted = both[1][-1]
        assert isinstance(aborted, UsageDelta) and aborted.finish_reason == "abort"
        assert aborted.usage.generated_tokens < 4000

    on_engine(tiny_m3_dir, check, num_gpu_blocks=64)


def test_prompt_too_long_while_another_request_completes(tiny_m3_dir):
    async def check(engine):
        ok = asyncio.create_task(collect(engine, chat("ok", "short", max_tokens=20)))
        with pytest.raises(PromptTooLong, match="more than the model's maximum of 511"):
            await collect(engine, chat("long", "word " * 2000))
        _, usage = await ok
        assert usage.usage.generated_tokens >= 1

    on_engine(tiny_m3_dir, check, num_gpu_blocks=64, max_model_len=512)


def test_missing_model_is_engine_unavailable(tmp_path):
    with pytest.raises(EngineUnavailable, match="cannot load the native model"):
        NativeEngine.from_model_dir(tmp_path / "nope")


def test_no_tool_call_deltas_without_tools(tiny_m3_dir):
    async def check(engine):
        deltas, usage = await collect(engine, chat("x", "hi"))
        assert not any(isinstance(d, ToolCallDelta) for d in deltas)
        assert usage.finish_reason in ("stop", "length")

    on_engine(tiny_m3_dir, check, num_gpu_blocks=32)


def test_a_consumer_that_stops_early_frees_its_pages_and_close_is_final(tiny_m3_dir):
    async def main():
        engine = NativeEngine.from_model_dir(tiny_m3_dir, config=EngineConfig(num_gpu_blocks=32))
        pool = engine._engine.kv_cache_manager.block_pool
        stream = engine.stream(chat("early", "tell me everything " * 40, max_tokens=4000))
        first = await anext(stream)
        assert not isinstance(first, UsageDelta)
        assert pool.num_free_blocks < 31  # the request holds pages while it runs
        await stream.aclose()  # what a cancelled consumer does
        for _ in range(500):
            if pool.num_free_blocks == 31 and not engine._engine.has_unfinished_requests():
                break
            await asyncio.sleep(0.01)
        assert pool.num_free_blocks == 31
        await engine.close()
        with pytest.raises(EngineUnavailable, match="closed"):
            await collect(engine, chat("late", "hi"))

    asyncio.run(main())
