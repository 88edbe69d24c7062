"""`MediaInput`: one preprocessed image or video, the hand-off shared by every backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np


@dataclass(frozen=True, slots=True, eq=False)
class MediaInput:
    kind: Literal["image", "video"]
    path: str
    pixel_values: np.ndarray  # [N, 1176] float32, N = t*h*w patches in merge-window order
    grid_thw: tuple[int, int, int]  # (temporal groups, patch rows, patch cols)
    num_tokens: int  # image/video placeholder tokens = t*h*w/4 (no wrappers, no timestamps)
    resized_hw: tuple[int, int]  # (height, width) every frame was resized to
    source_hw: tuple[int, int]  # (height, width) of the original after EXIF orientation
    frame_indices: tuple[int, ...] = ()  # video: sampled source frames, before padding
    timestamps: tuple[float, ...] = ()  # video: seconds of each temporal group's first frame
    source_fps: float | None = None  # video: the container's frame rate
    total_frames: int | None = None  # video: frames decoded from the file

    def __post_init__(self) -> None:
        t, h, w = self.grid_thw
        if self.pixel_values.shape[0] != t * h * w:
            raise ValueError(
                f"pixel_values has {self.pixel_values.shape[0]} rows, grid {t * h * w}"
            )

    @property
    def tokens_per_group(self) -> int:
        return self.num_tokens // self.grid_thw[0]
