"""One entry point: a MediaPart -> MediaInput, with the kind checked against the bytes."""

from __future__ import annotations

from m3agent.engine.api import MediaPart
from m3agent.engine.m3.media.config import MediaConfig, MediaLimits
from m3agent.engine.m3.media.errors import MediaError
from m3agent.engine.m3.media.files import check_file, sniff_kind
from m3agent.engine.m3.media.image import load_image
from m3agent.engine.m3.media.result import MediaInput
from m3agent.engine.m3.media.video import load_video


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
