"""M3's preprocessing constants (SPEC §5) and the per-request limits, validated at construction.

The defaults are the class defaults of vLLM's vendored `MiniMaxM3VLImageProcessor` /
`MiniMaxM3VLVideoProcessor`; a checkpoint's `preprocessor_config.json` may override some of
them (`MediaConfig.from_preprocessor_config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True, slots=True)
class MediaConfig:
    patch_size: int = 14
    merge_size: int = 2
    temporal_patch_size: int = 2
    image_min_pixels: int = 4 * 28 * 28  # 3,136
    image_max_pixels: int = 672 * 672  # 451,584
    image_max_long_side: int | None = None  # opt-in long-side mode (SPEC §5.1)
    video_min_pixels: int = 4 * 28 * 28
    video_max_pixels: int = 768 * 28 * 28  # 602,112
    video_fps: float = 1.0  # vLLM's loader samples at 1 fps
    mean: tuple[float, float, float] = CLIP_MEAN
    std: tuple[float, float, float] = CLIP_STD

    def __post_init__(self) -> None:
        for name in ("patch_size", "merge_size", "temporal_patch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"media config: {name} must be >= 1")
        if not 0 < self.image_min_pixels <= self.image_max_pixels:
            raise ValueError("media config: need 0 < image_min_pixels <= image_max_pixels")
        if not 0 < self.video_min_pixels <= self.video_max_pixels:
            raise ValueError("media config: need 0 < video_min_pixels <= video_max_pixels")
        if self.video_fps <= 0:
            raise ValueError("media config: video_fps must be > 0")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise ValueError("media config: mean and std need 3 values, std > 0")

    @property
    def factor(self) -> int:
        """Resized sides are multiples of this (one 2x2 merge window of 14-pixel patches)."""
        return self.patch_size * self.merge_size

    @property
    def patch_dim(self) -> int:
        """Values per flattened patch: C * T * P * P = 1176 by default."""
        return 3 * self.temporal_patch_size * self.patch_size * self.patch_size

    @classmethod
    def from_preprocessor_config(cls, d: dict[str, Any]) -> MediaConfig:
        """Read the fields vLLM's processor takes from a checkpoint's preprocessor_config.json."""
        kw: dict[str, Any] = {}
        for src, dst in (
            ("patch_size", "patch_size"),
            ("merge_size", "merge_size"),
            ("temporal_patch_size", "temporal_patch_size"),
            ("max_pixels", "image_max_pixels"),
            ("max_long_side_pixel", "image_max_long_side"),
        ):
            if d.get(src) is not None:
                kw[dst] = d[src]
        if d.get("image_mean") is not None:
            kw["mean"] = tuple(float(x) for x in d["image_mean"])
        if d.get("image_std") is not None:
            kw["std"] = tuple(float(x) for x in d["image_std"])
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class MediaLimits:
    """What one request may carry. Checked before pixels are decoded where possible."""

    max_images: int = 16
    max_videos: int = 4
    max_file_bytes: int = 1 << 30  # 1 GiB per file
    # Decompression-bomb guard: source images (and video frames) larger than this are refused
    # from the header alone, before any pixel is decoded. 100 MP images must fail.
    max_source_pixels: int = 64_000_000
    max_video_seconds: float = 600.0
    max_video_frames: int = 1024  # sampled frames (1 fps -> ~17 minutes)

    def __post_init__(self) -> None:
        if self.max_images < 0 or self.max_videos < 0:
            raise ValueError("media limits: counts must be >= 0")
        if self.max_file_bytes <= 0 or self.max_source_pixels <= 0:
            raise ValueError("media limits: byte and pixel limits must be > 0")
        if self.max_video_seconds <= 0 or self.max_video_frames <= 0:
            raise ValueError("media limits: video limits must be > 0")
