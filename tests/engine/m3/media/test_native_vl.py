"""End to end on a CPU: a tiny random M3 VL checkpoint answers a prompt with an image and a video."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.m3.media import VisionTokenIds, expand_prompt_ids, load_image, load_video
from m3agent.engine.m3.media.placeholders import prompt_token_count
from m3agent.engine.native.core.engine_config import EngineConfig
from m3agent.engine.native.core.llm_engine import LLMEngine
from m3agent.engine.native.core.sampling_params import native_params
from m3agent.engine.native.loaders.checkpoint import load_model
from m3agent.engine.native.loaders.vision import load_vision_tower
from m3agent.engine.native.runner.mm_inputs import MultiModalInputs
from PIL import Image

from ....support.native import tiny_vl


@pytest.fixture(scope="module")
def vl_checkpoint(tmp_path_factory):
    return tiny_vl(tmp_path_factory.mktemp("tiny_vl"))


def _answer(ckpt, tok, items, max_tokens=6, chunk=2048):
    ids = VisionTokenIds.from_vocab(tok.token_to_id)
    text = "Compare ]<]image[>[ with ]<]video[>[ please."
    prompt = expand_prompt_ids(tok.encode(text).ids, items, ids, lambda s: tok.encode(s).ids)
    mm = MultiModalInputs.build(prompt, items, ids)
    engine = LLMEngine(
        load_model(ckpt),
        config=EngineConfig(keep_logits=True, max_num_batched_tokens=chunk, max_model_len=4096),
        vision_tower=load_vision_tower(ckpt),
    )
    engine.add_request(
        "r", prompt, native_params(max_tokens=max_tokens, ignore_eos=True), mm_inputs=mm
    )
    final = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                final = out
    return prompt, final, engine.kept_logits.get("r")


def test_image_and_video_prompt_runs_end_to_end(vl_checkpoint, make_video, tmp_path):
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(vl_checkpoint / "tokenizer.json"))
    img = tmp_path / "a.png"
    Image.new("RGB", (100, 100), (200, 30, 30)).save(img)
    image = load_image(img)  # 112x112 -> 16 tokens
    video = load_video(make_video(fps=10, frames=20, width=64, height=48))  # 3 frames -> 2 groups
    assert image.num_tokens == 16 and video.grid_thw == (2, 4, 4) and video.num_tokens == 8
    prompt, out, logits = _answer(vl_checkpoint, tok, [image, video])
    assert out is not None and out.error is None, out and out.error
    assert out.num_generated_tokens == 6
    enc = lambda s: tok.encode(s).ids  # noqa: E731
    base = len(tok.encode("Compare ]<]image[>[ with ]<]video[>[ please.").ids) - 2
    assert (
        out.num_prompt_tokens
        == len(prompt)
        == (base + prompt_token_count(image, enc) + prompt_token_count(video, enc))
    )
    # The pictures reach the model: another image changes the first logits, and chunked
    # prefill (placeholder runs cut across chunks) gives the same answer as one chunk.
    img2 = tmp_path / "b.png"
    Image.new("RGB", (100, 100), (10, 200, 90)).save(img2)
    _, out2, logits2 = _answer(vl_checkpoint, tok, [load_image(img2), video])
    assert not torch.allclose(logits[0], logits2[0])
    _, out3, logits3 = _answer(vl_checkpoint, tok, [image, video], chunk=7)
    assert out3.token_ids == out.token_ids
    torch.testing.assert_close(logits3[0], logits[0], rtol=1e-4, atol=1e-4)


def test_engine_without_tower_refuses_media(vl_checkpoint):
    from m3agent.engine.api import EngineRequestError

    engine = LLMEngine(load_model(vl_checkpoint), config=EngineConfig(max_model_len=512))
    with pytest.raises(EngineRequestError, match="no vision tower"):
        engine.add_request("r", [1, 2, 3], mm_inputs=object())
