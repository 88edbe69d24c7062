"""Videos -> MediaInput (SPEC §5.2): streamed PyAV decode, 1 fps sampling, resize, patches.

Only the sampled frames are converted to RGB and kept, already resized (a 60 s 1080p clip at
1 fps keeps ~61 frames of 1008x560 uint8, ~100 MB); every other decoded frame is dropped as
soon as the decoder hands it over, so memory does not grow with the file's length.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from .config import MediaConfig, MediaLimits
from .errors import MediaError
from .files import check_file
from .image import resize_frame
from .patches import frames_to_patches
from .resize import smart_resize
from .result import MediaInput
from .sampling import FrameSampler, group_timestamps

# A stream may stop this much before its declared duration and still count as complete
# (B-frame reordering, audio-longer-than-video containers).
_TRUNCATION_SLACK_S = 1.0


@dataclass(frozen=True, slots=True)
class VideoProbe:
    width: int
    height: int
    fps: float
    duration_s: float | None
    declared_frames: int  # 0 when the container does not say
    codec: str
    container: str


def _open(path: str | Path) -> av.container.InputContainer:
    try:
        return av.open(str(path), mode="r")
    except av.error.FFmpegError as e:
        raise MediaError(
            path, f"not a readable video: unsupported container, corrupt or truncated ({_why(e)})"
        ) from None


def _probe_open(path: str | Path, container: av.container.InputContainer) -> VideoProbe:
    if not container.streams.video:
        raise MediaError(path, "contains no video stream")
    stream = container.streams.video[0]
    ctx = stream.codec_context
    if ctx is None:  # FFmpeg knows no decoder for this stream's codec id / fourcc
        tag = getattr(stream, "codec_tag", None) or "unknown"
        raise MediaError(path, f"unsupported video codec (tag '{tag}', no decoder available)")
    codec = ctx.name
    rate = stream.average_rate or stream.guessed_rate or stream.base_rate
    if not rate or float(rate) <= 0:
        raise MediaError(path, "video frame rate is unknown")
    duration: float | None = None
    if stream.duration is not None and stream.time_base is not None:
        duration = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        duration = container.duration / av.time_base
    return VideoProbe(
        width=ctx.width,
        height=ctx.height,
        fps=float(rate),
        duration_s=duration,
        declared_frames=stream.frames or 0,
        codec=codec,
        container=container.format.name,
    )


def probe_video(path: str | Path, limits: MediaLimits | None = None) -> VideoProbe:
    """Header facts (size, rate, duration) without decoding a frame; checks the limits."""
    limits = limits or MediaLimits()
    check_file(path, limits.max_file_bytes)
    with _open(path) as container:
        probe = _probe_open(path, container)
    _check_limits(path, probe, limits)
    return probe


def _check_limits(path: str | Path, probe: VideoProbe, limits: MediaLimits) -> None:
    if probe.width <= 0 or probe.height <= 0:
        raise MediaError(path, "video frame size is unknown")
    if probe.width * probe.height > limits.max_source_pixels:
        raise MediaError(
            path,
            f"video frames are {probe.width}x{probe.height}, above the limit of "
            f"{limits.max_source_pixels / 1e6:.1f} MP",
        )
    if probe.duration_s is not None and probe.duration_s > limits.max_video_seconds:
        raise MediaError(
            path,
            f"video is {probe.duration_s:.1f} s long, above the limit of "
            f"{limits.max_video_seconds:.0f} s",
        )


def load_video(
    path: str | Path, cfg: MediaConfig | None = None, limits: MediaLimits | None = None
) -> MediaInput:
    """Decode as a stream, sample at cfg.video_fps, resize, patchify. Errors are MediaError."""
    cfg = cfg or MediaConfig()
    limits = limits or MediaLimits()
    check_file(path, limits.max_file_bytes)
    with _open(path) as container:
        probe = _probe_open(path, container)
        _check_limits(path, probe, limits)
        try:
            hw = smart_resize(
                probe.height,
                probe.width,
                factor=cfg.factor,
                min_pixels=cfg.video_min_pixels,
                max_pixels=cfg.video_max_pixels,
                max_total_pixels=None,
            )
        except ValueError as e:
            raise MediaError(path, str(e)) from None
        kept, indices, total, last_time = _decode_sampled(path, container, probe, hw, cfg, limits)
    if not kept:
        raise MediaError(path, "no decodable video frames (corrupt or truncated)")
    if probe.declared_frames > 0 and total < probe.declared_frames - max(2, probe.fps):
        raise MediaError(
            path, f"truncated video: {total} of a declared {probe.declared_frames} frames decode"
        )
    if probe.duration_s is not None and last_time is not None:
        frame_s = 1.0 / probe.fps
        if last_time + frame_s < probe.duration_s - _TRUNCATION_SLACK_S:
            raise MediaError(
                path,
                f"truncated video: frames stop at {last_time:.1f} s of a declared "
                f"{probe.duration_s:.1f} s",
            )
    pixel_values = frames_to_patches(kept, cfg)
    grid_t = -(-len(kept) // cfg.temporal_patch_size)
    grid = (grid_t, hw[0] // cfg.patch_size, hw[1] // cfg.patch_size)
    return MediaInput(
        kind="video",
        path=str(path),
        pixel_values=pixel_values,
        grid_thw=grid,
        num_tokens=grid_t * grid[1] * grid[2] // (cfg.merge_size**2),
        resized_hw=hw,
        source_hw=(probe.height, probe.width),
        frame_indices=tuple(indices),
        timestamps=group_timestamps(indices, probe.fps, cfg.temporal_patch_size),
        source_fps=probe.fps,
        total_frames=total,
    )


def _decode_sampled(
    path: str | Path,
    container: av.container.InputContainer,
    probe: VideoProbe,
    hw: tuple[int, int],
    cfg: MediaConfig,
    limits: MediaLimits,
) -> tuple[list[np.ndarray], list[int], int, float | None]:
    """(kept frames, their indices, frames decoded, time of the last frame)."""
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"  # frame threads: decoding dominates the cost
    sampler = FrameSampler(probe.fps, cfg.video_fps)
    kept: list[np.ndarray] = []
    indices: list[int] = []
    last_frame: av.VideoFrame | None = None
    last_time: float | None = None
    index = -1
    first_time: float | None = None
    try:
        for index, frame in enumerate(container.decode(stream)):
            # Relative to the first frame: MPEG-TS and edited MP4s do not start at 0.
            t = _frame_time(frame, index, probe.fps)
            first_time = t if first_time is None else first_time
            t -= first_time
            if t > limits.max_video_seconds:
                raise MediaError(
                    path, f"video runs past the limit of {limits.max_video_seconds:.0f} s"
                )
            last_time = t
            if sampler.offer(index):
                kept.append(resize_frame(frame.to_image(), hw))
                indices.append(index)
                if len(kept) > limits.max_video_frames:
                    raise MediaError(
                        path, f"more than {limits.max_video_frames} sampled frames (limit)"
                    )
            last_frame = frame
    except av.error.FFmpegError as e:
        raise MediaError(path, f"corrupt or truncated video ({_why(e)})") from None
    if last_frame is not None and sampler.keep_last(index):
        kept.append(resize_frame(last_frame.to_image(), hw))
        indices.append(index)
    return kept, indices, index + 1, last_time


def _frame_time(frame: av.VideoFrame, index: int, fps: float) -> float:
    if frame.pts is not None and frame.time_base is not None:
        return float(frame.pts * Fraction(frame.time_base))
    return index / fps


def _why(e: av.error.FFmpegError) -> str:
    """FFmpeg's reason without the file name it appends (the message already names it)."""
    return getattr(e, "strerror", None) or type(e).__name__
