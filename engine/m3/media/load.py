"""One entry point: a MediaPart -> MediaInput, with the kind checked against the bytes."""

from __future__ import annotations

from ...api import MediaPart
from .config import MediaConfig, MediaLimits
from .errors import MediaError
from .files import check_file, sniff_kind
from .image import load_image
from .result import MediaInput
from .video import load_video


def load_media(
    part: MediaPart, cfg: MediaConfig | None = None, limits: MediaLimits | None = None
) -> MediaInput:
    limits = limits or MediaLimits()
    check_file(part.path, limits.max_file_bytes)
    sniffed = sniff_kind(part.path)
    if sniffed is not None and sniffed != part.kind:
        raise MediaError(part.path, f"attached as {part.kind} but the file is a {sniffed} file")
    if part.kind == "image":
        return load_image(part.path, cfg, limits)
    return load_video(part.path, cfg, limits)
