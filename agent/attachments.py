"""Check a turn's attachments before anything is sent: exists, really an image / video, limits.

Cheap by design: headers only (Pillow's lazy open, the container's metadata), so a bad file is
refused with one clear line before the turn starts and the session goes on. Full decoding
happens later, in the engine's media preprocessing, under the same limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from m3agent.engine.api import MediaPart
from m3agent.engine.m3.media.config import MediaLimits
from m3agent.engine.m3.media.errors import MediaError
from m3agent.engine.m3.media.files import check_file, sniff_kind
from m3agent.engine.m3.media.image import open_image
from m3agent.engine.m3.media.video import probe_video


class AttachmentError(ValueError):
    """One attachment (or the set of them) cannot be sent; the message is one line."""


def validate_attachments(
    media: Sequence[MediaPart], limits: MediaLimits | None = None, cwd: str | Path | None = None
) -> tuple[MediaPart, ...]:
    """The parts with absolute paths, in order; AttachmentError on the first problem."""
    limits = limits or MediaLimits()
    n_img = sum(1 for m in media if m.kind == "image")
    n_vid = sum(1 for m in media if m.kind == "video")
    if n_img > limits.max_images:
        raise AttachmentError(f"{n_img} images attached, the limit is {limits.max_images}")
    if n_vid > limits.max_videos:
        raise AttachmentError(f"{n_vid} videos attached, the limit is {limits.max_videos}")
    base = Path(cwd) if cwd is not None else Path.cwd()
    out = []
    for part in media:
        if part.kind not in ("image", "video"):
            raise AttachmentError(f"{part.path}: unknown attachment kind {part.kind!r}")
        path = (base / Path(part.path).expanduser()).resolve()
        try:
            _check_one(path, part.kind, limits)
        except MediaError as e:
            raise AttachmentError(str(e)) from None
        except Exception as e:  # noqa: BLE001 - a decoder's own error on a hostile file
            # (Pillow raises ValueError for a zTXt/iCCP bomb, SyntaxError for a bad chunk):
            # one line, never a traceback that ends the session.
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise AttachmentError(f"{path.name}: cannot read the {part.kind} ({why})") from None
        out.append(MediaPart(part.kind, str(path)))
    return tuple(out)


def _check_one(path: Path, kind: str, limits: MediaLimits) -> None:
    check_file(path, limits.max_file_bytes)
    sniffed = sniff_kind(path)
    if sniffed is None and kind == "image":
        raise MediaError(path, "not an image this tool reads (PNG, JPEG, WebP, GIF, BMP)")
    if sniffed is not None and sniffed != kind:
        raise MediaError(path, f"attached as {kind} but the file is a {sniffed} file")
    if kind == "image":
        open_image(path, limits).close()  # header: format and the decompression-bomb guard
    else:
        probe_video(path, limits)  # container, codec, frame size, duration


def attach_kind(path: str | Path) -> str | None:
    """'image' / 'video' from the file's bytes (for a UI that attaches a dropped path)."""
    try:
        return sniff_kind(path)
    except OSError:
        return None
