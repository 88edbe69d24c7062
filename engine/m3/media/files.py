"""File checks shared by the image and video loaders: exists, regular, not empty, not huge."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import MediaError

# Leading bytes of the containers we accept, to tell "an image" from "a video" from "neither"
# without trusting the file name.
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
    (b"BM", "bmp"),
)


def check_file(path: str | Path, max_bytes: int) -> int:
    """Size in bytes of a readable, non-empty regular file; else a MediaError."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise MediaError(p, "file not found") from None
    except OSError as e:
        raise MediaError(p, f"cannot read ({e.strerror})") from None
    if not p.is_file():
        raise MediaError(p, "not a regular file")
    if st.st_size == 0:
        raise MediaError(p, "file is empty")
    if st.st_size > max_bytes:
        raise MediaError(p, f"file is {st.st_size} bytes, above the limit of {max_bytes}")
    if not os.access(p, os.R_OK):
        raise MediaError(p, "permission denied")
    return st.st_size


def sniff_kind(path: str | Path) -> str | None:
    """'image', 'video' or None, from the first bytes of the file."""
    with open(path, "rb") as f:
        head = f.read(64)
    if any(head.startswith(m) for m, _ in _IMAGE_MAGIC):
        return "image"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image"
    if head[:4] == b"RIFF" and head[8:12] == b"AVI ":
        return "video"
    if head[4:8] == b"ftyp":  # ISO BMFF: mp4/mov, but also HEIF/AVIF stills
        brand = head[8:12]
        return "image" if brand in (b"heic", b"heix", b"avif", b"mif1", b"msf1") else "video"
    if head[:4] == b"\x1a\x45\xdf\xa3":  # Matroska / WebM
        return "video"
    if head[:4] in (b"\x00\x00\x01\xba", b"\x00\x00\x01\xb3") or head[:1] == b"\x47":
        return "video"  # MPEG-PS / MPEG-1/2 elementary / MPEG-TS
    if head[4:8] in (b"moov", b"mdat", b"wide", b"free"):
        return "video"  # old QuickTime without ftyp
    return None
