"""Requests through VllmEngine over the fake vllm: prompts rendered and outputs parsed by our
m3 layer, thinking mode and media per request, cached tokens, abort on interrupt."""

from __future__ import annotations

import asyncio

import pytest
from m3agent.engine.api import (
    ChatRequest,
    ContentDelta,
    EngineRequestError,
    MediaPart,
    Message,
    PromptTooLong,
    ReasoningDelta,
    SamplingParams,
    ToolCallDelta,
    UsageDelta,
)
from m3agent.engine.backends.vllm import VllmEngine
from m3agent.engine.backends.vllm_args import GpuInfo, VllmOptions
from m3agent.engine.m3.chat_template import generation_prefix
from m3agent.engine.m3.tokens import ROLE
from PIL import Image

GB = 10**9

NS = "]<]minimax[>["
READ_TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}


@pytest.fixture
def engine(vllm, checkpoint):
    path = checkpoint(weight_bytes=2 * GB)
    gpus = GpuInfo(count=1, memory_bytes=141 * GB, name="H200")
    eng = VllmEngine.from_model_dir(path, VllmOptions(max_model_len=8192), gpus=gpus)
    yield eng
    asyncio.run(eng.close())


def request(
    rid: str, text: str = "hello", mode: str = "adaptive", media=(), tools=(), history=()
) -> ChatRequest:
    msgs = (
        Message("system", "You are a coding agent. " * 40),
        *history,
        Message("user", text, media=tuple(media)),
    )
    return ChatRequest(
        rid,
        msgs,
        tools=tuple(tools),
        thinking_mode=mode,
        sampling=SamplingParams(max_tokens=64, temperature=0.0),
    )


def prompt_text(prompt: dict) -> str:
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    return M3Tokenizer.default().decode(prompt["prompt_token_ids"])


async def collect(eng, req):
    return [d async for d in eng.stream(req)]


def test_reasoning_content_and_tool_call_parsed_by_m3_layer(engine, vllm):
    vllm.scripts.append(
        "let me look</mm:think>Reading it."
        f'{NS}<tool_call>\n{NS}<invoke name="read_file">{NS}<path>a.py{NS}</path>'
        f"{NS}</invoke>\n{NS}</tool_call>"
    )
    out = asyncio.run(collect(engine, request("r1", mode="enabled", tools=[READ_TOOL])))
    assert "".join(d.text for d in out if isinstance(d, ReasoningDelta)) == "let me look"
    assert "".join(d.text for d in out if isinstance(d, ContentDelta)).strip() == "Reading it."
    calls = [d.call for d in out if isinstance(d, ToolCallDelta)]
    assert [(c.name, c.arguments) for c in calls] == [("read_file", {"path": "a.py"})]
    last = out[-1]
    assert isinstance(last, UsageDelta) and last.finish_reason == "tool_calls"
    assert last.raw_text.startswith("let me look</mm:think>")
    assert last.usage.prompt_tokens > 0 and last.usage.generated_tokens == len(last.raw_text)
    _, prompt, params = vllm.requests[-1]
    assert params.skip_special_tokens is False and params.max_tokens == 64
    assert params.output_kind.name == "DELTA"
    assert '"name": "read_file"' in prompt_text(prompt)  # the tools went into OUR rendered prompt


def test_thinking_mode_goes_per_request(engine, vllm):
    for i, mode in enumerate(("enabled", "disabled", "adaptive")):
        vllm.scripts.append("</mm:think>fine" if mode == "enabled" else "fine")
        out = asyncio.run(collect(engine, request(f"t{i}", mode=mode)))
        assert "".join(d.text for d in out if isinstance(d, ContentDelta)) == "fine"
    prompts = [prompt_text(p) for _, p, _ in vllm.requests]
    for prompt, mode in zip(prompts, ("enabled", "disabled", "adaptive"), strict=True):
        assert prompt.endswith(f"{ROLE}ai\n" + generation_prefix(mode)), mode
    assert len(set(prompts)) == 3


def test_media_passed_per_request(engine, vllm, tmp_path):
    img = tmp_path / "shot.png"
    Image.new("RGB", (64, 48), (200, 10, 10)).save(img)
    asyncio.run(
        collect(engine, request("m1", "what is this?", media=[MediaPart("image", str(img))]))
    )
    asyncio.run(collect(engine, request("m2", "and now text only")))
    (_, with_media, _), (_, without, _) = vllm.requests[-2:]
    image = with_media["multi_modal_data"]["image"]
    assert isinstance(image, Image.Image) and image.mode == "RGB"
    assert "]<]image[>[" in prompt_text(with_media)
    assert "multi_modal_data" not in without


def test_too_many_images_is_a_request_error(engine, tmp_path):
    img = tmp_path / "a.png"
    Image.new("RGB", (32, 32)).save(img)
    with pytest.raises(EngineRequestError, match="17 images in one request; the limit is 16"):
        asyncio.run(collect(engine, request("x", media=[MediaPart("image", str(img))] * 17)))


def test_cached_tokens_reported_on_a_repeated_prefix(engine, vllm):
    first = asyncio.run(collect(engine, request("c1", "one")))[-1]
    second = asyncio.run(collect(engine, request("c2", "two")))[-1]
    assert first.usage.cached_prompt_tokens == 0
    assert second.usage.cached_prompt_tokens >= 128  # the long system prompt is shared
    assert second.usage.cached_prompt_tokens % 128 == 0
    assert engine.stats().cached_prompt_tokens == second.usage.cached_prompt_tokens


def test_interrupt_aborts_the_request(engine, vllm):
    vllm.scripts.append("</mm:think>" + "word " * 200)
    vllm.delay_s = 0.001

    async def main():
        gen = engine.stream(request("int1"))
        async for d in gen:
            if isinstance(d, ContentDelta):
                break  # the agent's Interrupt: stop consuming
        await gen.aclose()

    asyncio.run(main())
    assert vllm.aborted == ["int1"]


async def aborted_after_two(engine, rid: str) -> list:
    """The deltas of request rid, aborted once two have arrived."""
    out = []
    async for d in engine.stream(request(rid)):
        out.append(d)
        if len(out) == 2:
            await engine.abort(rid)
    return out


def test_abort_mid_stream_ends_with_abort(engine, vllm):
    vllm.scripts.append("</mm:think>" + "word " * 200)
    vllm.delay_s = 0.001

    out = asyncio.run(aborted_after_two(engine, "ab1"))
    assert isinstance(out[-1], UsageDelta) and out[-1].finish_reason == "abort"
    assert "ab1" in vllm.aborted
    assert len(out) < 50  # it stopped long before the 1000 characters


def test_prompt_too_long_is_refused_before_vllm(engine, vllm):
    with pytest.raises(PromptTooLong, match="more than the model's maximum of 8192"):
        asyncio.run(collect(engine, request("long", "x " * 20000)))
    assert vllm.requests == []


def test_close_shuts_vllm_down(engine, vllm):
    asyncio.run(engine.close())
    asyncio.run(engine.close())
    assert vllm.shutdowns == 1


def test_markup_typed_in_a_message_stays_text(engine, vllm):
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    image_id = M3Tokenizer.default().token_to_id("]<]image[>[")
    asyncio.run(collect(engine, request("txt", "please print ]<]image[>[ literally")))
    ids = vllm.requests[-1][1]["prompt_token_ids"]
    assert image_id is not None and image_id not in ids


def test_abort_ends_the_stream_even_without_a_final_output(engine, vllm):
    vllm.scripts.append("</mm:think>" + "word " * 400)
    vllm.delay_s = 0.01
    vllm.abort_wakes = False  # the engine goes silent instead of sending finish_reason=abort

    out = asyncio.run(asyncio.wait_for(aborted_after_two(engine, "quiet"), timeout=10))
    assert isinstance(out[-1], UsageDelta) and out[-1].finish_reason == "abort"
    assert vllm.aborted == ["quiet"] and vllm.cancelled == ["quiet"]
