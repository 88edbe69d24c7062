"""Images and videos through NativeEngine.stream (the chat level) on a tiny random VL checkpoint.

Real files made here (Pillow PNGs, a PyAV H.264 clip), a real checkpoint on disk, the real
engine thread; token counts are checked against SPEC §1.9/§5 numbers, not against the code.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from m3agent.engine.api import (
    ChatRequest,
    ContentDelta,
    EngineRequestError,
    MediaPart,
    Message,
    SamplingParams,
    ToolCall,
    UsageDelta,
)
from m3agent.engine.backends.native import NativeEngine
from m3agent.engine.m3.chat_template import render_prompt_parts
from m3agent.engine.m3.media import VisionTokenIds, load_video
from m3agent.engine.m3.media.placeholders import timestamp_text
from m3agent.engine.native.core.attention_metadata import BLOCK_SIZE
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny
from m3agent.engine.native.loaders.vision import write_random_vision_weights
from PIL import Image

from ....support.native import tiny_vl

# Long enough (byte-level tokenizer: ~1 token a byte) that the common prefix of two turns
# runs a whole KV block past the image, so the image's blocks can be cached.
LONG = "Describe this picture in detail. " * 6


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    return tiny_vl(tmp_path_factory.mktemp("tiny_vl"))


@pytest.fixture(scope="module")
def engine(vl_dir):
    eng = NativeEngine.from_model_dir(vl_dir)
    yield eng
    asyncio.run(eng.close())


def _png(path, colour, size=(100, 100)):
    Image.new("RGB", size, colour).save(path)
    return path


def _request(rid, messages, max_tokens=4):
    return ChatRequest(
        rid,
        tuple(messages),
        thinking_mode="disabled",
        sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=0),
    )


def _run(engine, request):
    async def go():
        text, usage = "", None
        async for d in engine.stream(request):
            if isinstance(d, ContentDelta):
                text += d.text
            elif isinstance(d, UsageDelta):
                usage = d
        return text, usage

    return asyncio.run(go())


def _text_ids(engine, messages):
    """Prompt ids as rendered, before expansion: one placeholder id per attachment."""
    parts = render_prompt_parts(list(messages), [], "disabled", template=engine._chat.template)
    return engine._chat.tokenizer.encode_parts(parts)


def test_image_and_video_answer_with_exact_prompt_tokens(engine, tmp_path, make_video):
    img = _png(tmp_path / "a.png", (200, 30, 30))  # 100x100 -> 112x112: 8x8 patches, 16 tokens
    clip = make_video(fps=10, frames=20, width=64, height=48)  # 2 s at 1 fps: 2 groups of 2x2
    msgs = [
        Message(
            "user",
            "Compare the picture and the clip.",
            media=(MediaPart("image", str(img)), MediaPart("video", str(clip))),
        )
    ]
    text, usage = _run(engine, _request("av", msgs))
    assert usage is not None and usage.usage.generated_tokens == 4
    tok = engine._chat.tokenizer
    ids = VisionTokenIds.from_vocab(tok.token_to_id)
    base = _text_ids(engine, msgs)
    assert base.count(ids.image) == 1 and base.count(ids.video) == 1
    stamps = load_video(clip).timestamps
    assert stamps == (0.0, 1.9)  # sampled frames 0, 10, 19 (padded to 4): groups start at 0, 19
    image_cost = 1 + 16 + 1
    video_cost = sum(len(tok.encode(timestamp_text(t))) + 1 + 4 + 1 for t in stamps)
    assert usage.usage.prompt_tokens == len(base) - 2 + image_cost + video_cost
    assert engine.stats().prompt_tokens >= usage.usage.prompt_tokens


def test_same_image_next_turn_hits_prefix_cache_other_image_misses(engine, tmp_path):
    a = _png(tmp_path / "same.png", (10, 120, 240), (60, 90))
    b = _png(tmp_path / "other.png", (240, 120, 10), (60, 90))

    def turn1(path):
        return Message("user", LONG, media=(MediaPart("image", str(path)),))

    answer, first = _run(engine, _request("t1", [turn1(a)]))
    hits_before = engine._media.cache.hits
    turn2 = [turn1(a), Message("assistant", answer or "ok"), Message("user", "And the colours?")]
    _, second = _run(engine, _request("t2", turn2))
    assert engine._media.cache.hits == hits_before + 1  # not decoded again
    ids = VisionTokenIds.from_vocab(engine._chat.tokenizer.token_to_id)
    start = _text_ids(engine, turn2).index(ids.image)  # first vision token is start + 1
    image_end = start + 1 + 6  # the end wrapper; 60x90 -> 56x84: 4x6 patches, 6 tokens
    # Every block up to the one holding the image's end is reused (turn 1 ran past it).
    assert second.usage.cached_prompt_tokens >= -(-(image_end + 1) // BLOCK_SIZE) * BLOCK_SIZE
    assert first.usage.cached_prompt_tokens < second.usage.cached_prompt_tokens
    # The same text and placeholder ids with a different picture: no block holding it is reused.
    turn2b = [turn1(b), Message("assistant", answer or "ok"), Message("user", "And the colours?")]
    _, third = _run(engine, _request("t3", turn2b))
    assert third.usage.cached_prompt_tokens <= start
    assert third.usage.prompt_tokens == second.usage.prompt_tokens


def test_bad_image_is_one_clear_error_and_the_engine_goes_on(engine, tmp_path):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 20)
    msgs = [Message("user", "What is it?", media=(MediaPart("image", str(bad)),))]
    with pytest.raises(EngineRequestError, match="broken.png") as err:
        _run(engine, _request("bad", msgs))
    assert "\n" not in str(err.value)
    good = _png(tmp_path / "fine.png", (1, 2, 3))
    _, usage = _run(
        engine, _request("good", [Message("user", "Now?", media=(MediaPart("image", str(good)),))])
    )
    assert usage.usage.generated_tokens == 4


def test_text_only_checkpoint_refuses_media_and_keeps_serving(tmp_path):
    d = tmp_path / "text_only"
    init_tiny(d, TinySpec(layers=1, dense_layers=1))
    eng = NativeEngine.from_model_dir(d)
    try:
        img = _png(tmp_path / "x.png", (5, 5, 5))
        with pytest.raises(EngineRequestError, match="text-only"):
            _run(eng, _request("m", [Message("user", "hi", media=(MediaPart("image", str(img)),))]))
        _, usage = _run(eng, _request("t", [Message("user", "hi")]))
        assert usage.usage.generated_tokens == 4
    finally:
        asyncio.run(eng.close())


def test_vision_config_without_weights_loads_text_only(tmp_path):
    d = tmp_path / "no_weights"
    init_tiny(d, TinySpec(layers=1, dense_layers=1))
    write_random_vision_weights(d, seed=2)
    (d / "vision.safetensors").unlink()  # and out of the index: a text checkpoint + config
    index = d / "model.safetensors.index.json"
    if index.exists():
        idx = json.loads(index.read_text())
        idx["weight_map"] = {
            k: v for k, v in idx["weight_map"].items() if v != "vision.safetensors"
        }
        index.write_text(json.dumps(idx))
    assert "vision_config" in json.loads((d / "config.json").read_text())
    eng = NativeEngine.from_model_dir(d)
    try:
        assert eng._media is None
    finally:
        asyncio.run(eng.close())


def test_media_cache_reuses_unchanged_files_and_reloads_changed_ones(tmp_path):
    from m3agent.engine.backends.native_media import MediaCache
    from m3agent.engine.m3.media import load_media

    cache = MediaCache()
    p = _png(tmp_path / "c.png", (9, 9, 9))
    part = MediaPart("image", str(p))
    first = cache.get_or_load(part, load_media)
    assert cache.get_or_load(part, load_media) is first and cache.hits == 1
    _png(p, (250, 9, 9), (200, 150))  # the file changes on disk (size and mtime)
    second = cache.get_or_load(part, load_media)
    assert second is not first and second.num_tokens != first.num_tokens
    small = MediaCache(max_bytes=first.pixel_values.nbytes)  # room for one small image only
    small.get_or_load(part, load_media)  # too big to keep
    small.get_or_load(part, load_media)
    assert small.hits == 0 and small.misses == 2


def test_per_request_limits_are_one_clear_error(engine, tmp_path):
    from m3agent.engine.backends.native_media import NativeMedia
    from m3agent.engine.m3.media import MediaLimits

    media = NativeMedia(
        engine._media.ids, engine._chat.tokenizer.encode, limits=MediaLimits(max_images=1)
    )
    img = _png(tmp_path / "l.png", (7, 7, 7))
    msgs = [
        Message("user", "one", media=(MediaPart("image", str(img)),)),
        Message("assistant", "ok"),
        Message("user", "two", media=(MediaPart("image", str(img)),)),
    ]
    ids = _text_ids(engine, msgs)
    with pytest.raises(EngineRequestError, match="2 images in one request; the limit is 1"):
        media.prepare(msgs, ids)
    expanded, mm = media.prepare(msgs[:1], _text_ids(engine, msgs[:1]))
    assert len(mm.items) == 1 and len(mm.positions) == mm.items[0].num_tokens
    assert [expanded[p] for p in mm.positions] == [media.ids.image] * len(mm.positions)


def _cli(vl_dir, tmp_path, *extra):
    home, cwd = tmp_path / "home", tmp_path / "cwd"  # the image lies outside the agent's cwd
    home.mkdir(exist_ok=True)
    cwd.mkdir(exist_ok=True)
    (home / "config.toml").write_text('max_tokens = 6\ndevice = "cpu"\n')
    env = {k: v for k, v in os.environ.items() if k != "M3AGENT_CONFIG"}
    env["M3AGENT_HOME"] = str(home)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "m3agent.app.cli",
            "run",
            "describe",
            "--engine",
            "native",
            "--model",
            str(vl_dir),
            *extra,
            "--output-format",
            "json",
            "--cwd",
            str(cwd),
            "--max-turns",
            "1",
            "--in-process",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def test_cli_run_native_with_an_image(vl_dir, tmp_path):
    img = _png(tmp_path / "shot.png", (30, 60, 90), (120, 80))
    r = _cli(vl_dir, tmp_path, "--image", str(img))
    assert r.returncode == 0, r.stderr
    with_image = json.loads(r.stdout)["usage"]["prompt_tokens"]
    r = _cli(vl_dir, tmp_path)
    assert r.returncode == 0, r.stderr
    # 120x80 -> 112x84: 8x6 patches -> 12 image tokens + 2 wrappers; the same prompt otherwise.
    assert with_image - json.loads(r.stdout)["usage"]["prompt_tokens"] == 12 + 2


def test_an_image_in_a_tool_result_is_expanded_like_an_attachment(engine, tmp_path):
    """A tool message's image (an MCP result) sits inside its <response> and costs the same
    tokens as the image attached to a user message."""
    img = _png(tmp_path / "tool.png", (30, 200, 30))
    call = ToolCall("call_1", "mcp__demo__photo", {})
    note = "the photo [image/png image]"
    msgs = [
        Message("user", "Look at the photo."),
        Message("assistant", "", tool_calls=(call,)),
        Message(
            "tool",
            note,
            tool_call_id="call_1",
            name=call.name,
            media=(MediaPart("image", str(img), offset=len(note)),),
        ),
    ]
    text, usage = _run(engine, _request("tool-img", msgs))
    base = _text_ids(engine, msgs)
    ids = VisionTokenIds.from_vocab(engine._chat.tokenizer.token_to_id)
    assert base.count(ids.image) == 1
    assert usage is not None and usage.usage.prompt_tokens == len(base) - 1 + 1 + 16 + 1
