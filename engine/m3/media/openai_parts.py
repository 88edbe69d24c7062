"""MediaPart -> an OpenAI chat content part with a data URL (the remote backend's hand-off).

A vLLM server re-runs M3's preprocessing itself, so images are sent as PNG of the oriented,
alpha-flattened, grid-resized picture (its resize then changes nothing and the server counts
the same tokens; EXIF is gone so no server can mis-rotate it). Videos go as the original file:
the server samples them with the same 1 fps rule.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

from PIL import Image

from ...api import MediaPart
from .config import MediaConfig, MediaLimits
from .image import load_image
from .patches import patches_to_frames
from .result import MediaInput
from .video import probe_video

_VIDEO_MIME = {
    "mov,mp4,m4a,3gp,3g2,mj2": "video/mp4",
    "matroska,webm": "video/webm",
    "avi": "video/x-msvideo",
    "mpegts": "video/mp2t",
    "mpeg": "video/mpeg",
}


def _data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def image_png_bytes(item: MediaInput, cfg: MediaConfig | None = None) -> bytes:
    frame = patches_to_frames(item.pixel_values, item.grid_thw, cfg or MediaConfig())[0]
    buf = io.BytesIO()
    Image.fromarray(frame, mode="RGB").save(buf, format="PNG")
    return buf.getvalue()


def to_openai_part(
    part: MediaPart, cfg: MediaConfig | None = None, limits: MediaLimits | None = None
) -> dict[str, Any]:
    """{"type": "image_url", ...} or {"type": "video_url", ...}. Errors are MediaError."""
    if part.kind == "image":
        item = load_image(part.path, cfg, limits)
        url = _data_url("image/png", image_png_bytes(item, cfg))
        return {"type": "image_url", "image_url": {"url": url}}
    probe = probe_video(part.path, limits)
    mime = _VIDEO_MIME.get(probe.container, "video/mp4")
    url = _data_url(mime, Path(part.path).read_bytes())
    return {"type": "video_url", "video_url": {"url": url}}
