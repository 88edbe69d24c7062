"""Which video frames M3 sees: vLLM's `MiniMaxM3VideoBackend` rule (SPEC §5.2).

Keep frame 0; then each next frame is the first one at least `1/fps - 1e-4` seconds after the
previously kept one (`ceil(t * native_fps)`, always moving forward). vLLM's backend also keeps
the very last frame when it is more than 1e-4 s after the last kept one (not written in the
SPEC's table; it is in the code the SPEC cites). No frame cap.
"""

from __future__ import annotations

import math

EPS = 1e-4


def sample_frame_indices(total_frames: int, native_fps: float, fps: float = 1.0) -> list[int]:
    """The sampled frame indices of a video of `total_frames` frames at `native_fps`."""
    sampler = FrameSampler(native_fps, fps)
    kept = [i for i in range(total_frames) if sampler.offer(i)]
    if total_frames > 0 and sampler.keep_last(total_frames - 1):
        kept.append(total_frames - 1)
    return kept


class FrameSampler:
    """The same rule, one decoded frame at a time, so decoding can stream.

    `offer(i)` is called for frames 0, 1, 2, ... in order; it says whether frame i is kept.
    At the end, `keep_last(last_index)` says whether the final frame is appended too.
    """

    def __init__(self, native_fps: float, fps: float = 1.0):
        self.native_fps = native_fps
        self.interval = 1.0 / fps if fps > 0 else 0.0
        # vLLM degenerates to [0] when either rate is unusable.
        self.only_first = native_fps <= 0 or fps <= 0
        self.next_frame = 0
        self.last_kept: int | None = None

    def offer(self, index: int) -> bool:
        if index != self.next_frame:
            return False
        self.last_kept = index
        if self.only_first:
            self.next_frame = -1
            return True
        prev_ts = index / self.native_fps
        target = math.ceil((prev_ts + self.interval - EPS) * self.native_fps)
        self.next_frame = max(target, index + 1)
        return True

    def keep_last(self, last_index: int) -> bool:
        if self.only_first or self.last_kept is None or self.last_kept == last_index:
            return False
        prev_ts = self.last_kept / self.native_fps
        return last_index / self.native_fps - prev_ts > EPS


def group_timestamps(
    frame_indices: list[int] | tuple[int, ...], native_fps: float, temporal_patch_size: int = 2
) -> tuple[float, ...]:
    """Seconds shown before each temporal group: frames_indices[min(2t, n-1)] / fps."""
    n = len(frame_indices)
    groups = -(-n // temporal_patch_size)
    return tuple(
        frame_indices[min(t * temporal_patch_size, n - 1)] / native_fps for t in range(groups)
    )
