"""Prompt expansion, and the hand-off to vLLM (pixels + metadata) and remote (data URLs)."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from m3agent.engine.api import MediaPart
from m3agent.engine.m3 import media
from m3agent.engine.m3.media.openai_parts import to_openai_part
from m3agent.engine.m3.media.resize import smart_resize
from m3agent.engine.m3.media.vllm_data import to_vllm_multimodal_data
from PIL import Image


@pytest.fixture
def image(tmp_path):
    p = tmp_path / "i.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (100, 130, 3), np.uint8)).save(p)
    return media.load_image(p)


def test_text_expansion(image, make_video):
    video = media.load_video(make_video(fps=10, frames=25, width=56, height=56))  # 0,10,20,24
    start, end = media.VISION_START, media.VISION_END
    img, vid = media.IMAGE_TOKEN, media.VIDEO_TOKEN
    text = media.expand_prompt_text(f"a {vid} b {img} c", [image, video])
    groups = f"]<]0.0 seconds[>[{start}{vid * 4}{end}]<]2.0 seconds[>[{start}{vid * 4}{end}"
    want = f"a {groups} b {start}{img * image.num_tokens}{end} c"
    assert text == want
    with pytest.raises(ValueError, match="1 image and 0 video placeholders"):
        media.expand_prompt_text(f"x {img}", [image, video])


def test_id_expansion(image, make_video):
    ids = media.VisionTokenIds()
    # frames 0, 10 and 14: 2 groups
    video = media.load_video(make_video(fps=10, frames=15, width=56, height=56))
    enc = lambda s: [len(s)]  # noqa: E731  a stand-in tokenizer: one id per timestamp text
    out = media.expand_prompt_ids([1, ids.image, 2, ids.video, 3], [image, video], ids, enc)
    n = image.num_tokens
    assert out[:2] == [1, ids.start] and out[2 : 2 + n] == [ids.image] * n
    assert out[2 + n : 5 + n] == [ids.end, 2, len("]<]0.0 seconds[>[")]
    assert out.count(ids.video) == video.num_tokens == 8
    assert out.count(ids.start) == 3 and out[-1] == 3
    with pytest.raises(ValueError, match="more media placeholders"):
        media.expand_prompt_ids([ids.image, ids.image], [image], ids, enc)


def test_vllm_data_is_resized_pixels_with_metadata(image, make_video):
    video = media.load_video(make_video(fps=10, frames=25, width=64, height=48))
    data = to_vllm_multimodal_data([image, video])
    img = data["image"]
    assert img.size == (image.resized_hw[1], image.resized_hw[0])
    # M3's resize leaves the handed-over size alone, so vLLM counts the same tokens
    assert smart_resize(img.height, img.width) == image.resized_hw
    frames, meta = data["video"]
    assert frames.shape == (4, 56, 56, 3) and frames.dtype == np.uint8
    assert meta["frames_indices"] == [0, 10, 20, 24] and meta["fps"] == 10.0
    assert meta["do_sample_frames"] is False


def test_openai_parts(tmp_path, make_video):
    p = tmp_path / "i.jpg"
    Image.new("RGB", (300, 200), (1, 2, 3)).save(p)
    part = to_openai_part(MediaPart("image", str(p)))
    assert part["type"] == "image_url"
    url = part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    png = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert png.size == (308, 196) and smart_resize(200, 300) == (196, 308)
    vid = make_video(codec="libvpx-vp9", fps=10, frames=10)
    vpart = to_openai_part(MediaPart("video", str(vid)))
    assert vpart["type"] == "video_url"
    assert vpart["video_url"]["url"].startswith("data:video/webm;base64,")
    assert base64.b64decode(vpart["video_url"]["url"].split(",", 1)[1]) == vid.read_bytes()


def test_load_media_checks_kind_against_bytes(tmp_path, make_video):
    vid = make_video(fps=10, frames=10)
    with pytest.raises(media.MediaError, match="attached as image but the file is a video"):
        media.load_media(MediaPart("image", str(vid)))
    assert media.load_media(MediaPart("video", str(vid))).kind == "video"
