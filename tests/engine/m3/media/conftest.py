"""Media the tests make themselves: PyAV-encoded clips and Pillow images."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

CONTAINERS = {"libx264": "mp4", "libvpx-vp9": "webm", "mpeg4": "mp4", "h264": "mp4"}


def have_encoder(name: str) -> bool:
    try:
        av.codec.Codec(name, "w")
        return True
    except Exception:
        return False


def encode_video(
    path: Path,
    *,
    codec: str = "libx264",
    width: int = 64,
    height: int = 48,
    fps: Fraction | int | float = 10,
    frames: int = 20,
) -> Path:
    """Each frame i is a flat colour whose red channel encodes i, so tests can tell frames apart."""
    rate = Fraction(fps).limit_denominator(1001)
    with av.open(str(path), mode="w") as out:
        stream = out.add_stream(codec, rate=rate)
        stream.width, stream.height = width, height
        stream.pix_fmt = "yuv420p"
        if codec in ("libx264", "h264"):
            stream.options = {"preset": "ultrafast", "crf": "18"}
        if codec == "libvpx-vp9":
            stream.options = {"deadline": "realtime", "cpu-used": "8"}
        for i in range(frames):
            img = np.zeros((height, width, 3), dtype=np.uint8)
            img[..., 0] = (i * 37) % 256
            img[..., 1] = 128
            img[..., 2] = (i * 11) % 256
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            frame.pts = i
            frame.time_base = 1 / rate
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


@pytest.fixture
def make_video(tmp_path):
    def _make(name: str = "clip", codec: str = "libx264", **kw) -> Path:
        if not have_encoder(codec):
            pytest.skip(f"this PyAV build has no {codec} encoder")
        ext = kw.pop("ext", CONTAINERS.get(codec, "mkv"))
        return encode_video(tmp_path / f"{name}.{ext}", codec=codec, **kw)

    return _make
