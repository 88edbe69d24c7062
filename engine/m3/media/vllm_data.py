"""MediaInput -> the `multi_modal_data` dict vLLM's `generate` / AsyncLLM take.

vLLM runs M3's own HF processor on whatever it is given, so we hand it pixels, not patches:
images as RGB `PIL.Image`s and videos as `(frames uint8 [T, H, W, 3], metadata)` pairs, already
oriented, flattened and resized to the 28-grid. M3's `smart_resize` leaves such sizes unchanged,
so vLLM counts exactly the tokens we counted. The metadata carries the source fps and the
sampled frame indices so that vLLM writes the same timestamps; `do_sample_frames=False` tells
it the frames are already sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from PIL import Image

from .config import MediaConfig
from .patches import patches_to_frames
from .result import MediaInput


def video_frames(item: MediaInput, cfg: MediaConfig | None = None) -> np.ndarray:
    """The sampled (unpadded) uint8 frames [T, H, W, 3] of a video item."""
    cfg = cfg or MediaConfig()
    frames = patches_to_frames(item.pixel_values, item.grid_thw, cfg)
    return frames[: len(item.frame_indices) or frames.shape[0]]


def to_vllm_multimodal_data(
    items: Sequence[MediaInput], cfg: MediaConfig | None = None
) -> dict[str, Any]:
    """{"image": [PIL.Image, ...], "video": [(frames, metadata), ...]} in prompt order per kind.

    Keys with no items are left out (vLLM rejects empty modality lists).
    """
    cfg = cfg or MediaConfig()
    images: list[Image.Image] = []
    videos: list[tuple[np.ndarray, dict[str, Any]]] = []
    for item in items:
        if item.kind == "image":
            frame = patches_to_frames(item.pixel_values, item.grid_thw, cfg)[0]
            images.append(Image.fromarray(frame, mode="RGB"))
        else:
            frames = video_frames(item, cfg)
            fps = item.source_fps or 1.0
            total = item.total_frames or len(item.frame_indices)
            meta = {
                "fps": fps,
                "frames_indices": list(item.frame_indices),
                "total_num_frames": total,
                "duration": total / fps,
                "video_backend": "m3agent",
                "do_sample_frames": False,
            }
            videos.append((frames, meta))
    data: dict[str, Any] = {}
    if images:
        data["image"] = images if len(images) > 1 else images[0]
    if videos:
        data["video"] = videos if len(videos) > 1 else videos[0]
    return data
