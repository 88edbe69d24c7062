"""Videos: real H.264 / VP9 / MPEG-4 clips, exact frame indices, token counts, bad input."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from m3agent.engine.m3.media import MediaError, MediaLimits, load_video, sample_frame_indices
from m3agent.engine.m3.media.sampling import FrameSampler
from m3agent.engine.m3.media.vllm_data import video_frames


@pytest.mark.parametrize(
    ("total", "fps", "expected"),
    [
        (90, 30, [0, 30, 60, 89]),
        (91, 30, [0, 30, 60, 90]),
        (100, 29.97, [0, 30, 60, 90, 99]),
        (48, 24, [0, 24, 47]),
        (50, 25, [0, 25, 49]),
        (1, 30, [0]),
        (5, 2, [0, 2, 4]),
        (7, 0.5, [0, 1, 2, 3, 4, 5, 6]),  # slower than 1 fps: every frame
        (12, 10, [0, 10, 11]),
        (0, 30, []),
    ],
)
def test_sampled_indices(total, fps, expected):
    assert sample_frame_indices(total, fps) == expected


def test_streaming_sampler_equals_batch_rule():
    for fps in (1, 7.5, 23.976, 24, 25, 29.97, 30, 59.94, 60, 120):
        for total in (1, 2, 29, 30, 31, 61, 299, 300, 301):
            s = FrameSampler(fps)
            kept = [i for i in range(total) if s.offer(i)]
            if s.keep_last(total - 1):
                kept.append(total - 1)
            assert kept == sample_frame_indices(total, fps), (fps, total)


@pytest.mark.parametrize("codec", ["libx264", "libvpx-vp9", "mpeg4"])
@pytest.mark.parametrize(
    ("fps", "frames", "indices"),
    [
        (30, 95, (0, 30, 60, 90, 94)),
        (Fraction(30000, 1001), 100, (0, 30, 60, 90, 99)),
        (24, 48, (0, 24, 47)),
        (10, 20, (0, 10, 19)),
    ],
)
def test_clip_frames_and_tokens(make_video, codec, fps, frames, indices):
    path = make_video(codec=codec, fps=fps, frames=frames, width=96, height=64)
    item = load_video(path)
    assert item.total_frames == frames
    assert item.frame_indices == indices
    assert item.source_fps == pytest.approx(float(fps), rel=1e-6)
    h, w = item.resized_hw
    assert (h, w) == (56, 84)
    groups = -(-len(indices) // 2)
    assert item.grid_thw == (groups, 4, 6)
    assert item.num_tokens == groups * h * w // 784
    assert item.pixel_values.shape == (groups * 24, 1176)
    expect_ts = tuple(indices[min(2 * t, len(indices) - 1)] / float(fps) for t in range(groups))
    assert item.timestamps == pytest.approx(expect_ts)
    # the kept frames are the right ones: the red channel encodes the frame number
    got = video_frames(item)
    assert got.shape[0] == len(indices)
    for frame, i in zip(got, indices, strict=True):
        assert abs(int(frame[..., 0].mean()) - (i * 37) % 256) <= 6


def test_odd_frame_count_pads_by_repeating_last(make_video):
    item = load_video(make_video(fps=10, frames=25, width=56, height=56))  # 0,10,20,24
    assert item.frame_indices == (0, 10, 20, 24)
    item3 = load_video(make_video(name="b", fps=10, frames=21, width=56, height=56))  # 0,10,20
    assert item3.grid_thw[0] == 2
    pv = item3.pixel_values.reshape(2, 16, 3, 2, 14, 14)
    np.testing.assert_array_equal(pv[1, :, :, 0], pv[1, :, :, 1])


def test_720p_video_gives_720_tokens_per_group(make_video):
    item = load_video(make_video(fps=2, frames=4, width=1280, height=720))
    assert item.resized_hw == (560, 1008)
    assert item.tokens_per_group == 720
    assert item.num_tokens == 720 * item.grid_thw[0]


def test_video_longer_than_limit(make_video):
    path = make_video(fps=10, frames=40)
    with pytest.raises(MediaError, match=r"4\.0 s long, above the limit of 3 s"):
        load_video(path, limits=MediaLimits(max_video_seconds=3))
    assert (
        load_video(path, limits=MediaLimits(max_video_seconds=5)).grid_thw[0] == 3
    )  # 0,10,20,30,39


def test_sampled_frame_cap(make_video):
    with pytest.raises(MediaError, match="sampled frames"):
        load_video(make_video(fps=1, frames=10), limits=MediaLimits(max_video_frames=5))


@pytest.mark.parametrize(
    ("codec", "ext"),
    [("libx264", "mp4"), ("libvpx-vp9", "webm"), ("mpeg4", "avi"), ("libx264", "mkv")],
)
def test_truncated_video(make_video, tmp_path, codec, ext):
    path = make_video(codec=codec, ext=ext, fps=30, frames=120)
    data = path.read_bytes()
    cut = tmp_path / f"cut.{ext}"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(MediaError, match="truncated") as e:
        load_video(cut)
    assert "\n" not in str(e.value) and str(e.value).startswith("cut.")


def test_unsupported_codec_and_container(make_video, tmp_path):
    good = make_video(codec="mpeg4", ext="avi")
    alien = tmp_path / "alien.avi"
    alien.write_bytes(good.read_bytes().replace(b"FMP4", b"ZZZZ"))  # a fourcc nobody decodes
    with pytest.raises(MediaError, match="unsupported video codec"):
        load_video(alien)
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00" * 4096)
    with pytest.raises(MediaError, match="unsupported container"):
        load_video(junk)
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    with pytest.raises(MediaError, match="file is empty"):
        load_video(empty)


def test_audio_only_file_has_no_video_stream(tmp_path):
    import av

    path = tmp_path / "tone.wav"
    with av.open(str(path), "w") as out:
        s = out.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(
            np.zeros((1, 800), np.int16), format="s16", layout="mono"
        )
        frame.sample_rate = 8000
        for p in s.encode(frame):
            out.mux(p)
        for p in s.encode():
            out.mux(p)
    with pytest.raises(MediaError, match="no video stream"):
        load_video(path)
