"""agent.attachments: per-request limits and header checks, each failure one clear line."""

from __future__ import annotations

import pytest
from m3agent.agent.attachments import AttachmentError, attach_kind, validate_attachments
from m3agent.engine.api import MediaPart
from m3agent.engine.m3.media import MediaLimits
from PIL import Image


def test_valid_parts_get_absolute_paths(tmp_path, make_video):
    img = tmp_path / "shot.png"
    Image.new("RGB", (40, 30)).save(img)
    vid = make_video(fps=10, frames=10)
    parts = validate_attachments(
        [MediaPart("image", "shot.png"), MediaPart("video", str(vid))], cwd=tmp_path
    )
    assert parts == (MediaPart("image", str(img)), MediaPart("video", str(vid)))
    assert attach_kind(img) == "image" and attach_kind(vid) == "video"


def test_limits_and_bad_files(tmp_path, make_video):
    img = tmp_path / "a.png"
    Image.new("RGB", (40, 30)).save(img)
    vid = make_video(fps=10, frames=50)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    bomb = tmp_path / "bomb.png"
    Image.new("1", (10000, 10000)).save(bomb)
    cases = [
        ([MediaPart("image", str(img))] * 3, MediaLimits(max_images=2), "3 images attached"),
        ([MediaPart("video", str(vid))] * 2, MediaLimits(max_videos=1), "2 videos attached"),
        ([MediaPart("image", str(tmp_path / "nope.png"))], None, "nope.png: file not found"),
        ([MediaPart("image", str(text))], None, "notes.txt: not an image"),
        ([MediaPart("video", str(img))], None, "attached as video but the file is a image file"),
        ([MediaPart("image", str(bomb))], None, "bomb.png: image is 10000x10000 = 100.0 MP"),
        (
            [MediaPart("video", str(vid))],
            MediaLimits(max_video_seconds=2),
            "above the limit of 2 s",
        ),
    ]
    for parts, limits, needle in cases:
        with pytest.raises(AttachmentError) as e:
            validate_attachments(parts, limits, cwd=tmp_path)
        assert needle in str(e.value) and "\n" not in str(e.value)
