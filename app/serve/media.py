"""Media parts of a chat request -> files the m3 media layer reads.

A data URL is decoded and written to the server's media directory (0600, named by its hash:
the same picture twice is one file). A `file://` URL is never opened on a client's say-so:
only inside a directory the server's owner allow-listed (`serve --allow-media-dir`), and every
other path gets the same answer whether it exists or not (no existence oracle).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path

from m3agent.tools.private_fs import open_private, private_dir

from .errors import WireError


def _allowed_file(url: str, allowed: tuple[Path, ...]) -> Path:
    """A file:// URL inside an allow-listed directory (symlinks resolved first), else the
    same refusal for every path: whether it exists is not the client's business."""
    refused = WireError(
        "bad request: file:// URLs are not opened by this server (send a data: URL; the "
        "owner can allow a directory with serve --allow-media-dir)"
    )
    path = Path(url[len("file://") :])
    if not allowed or not path.is_absolute():
        raise refused
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(d) for d in allowed):
        raise refused
    if not real.is_file():
        raise WireError(f"bad request: {path} is not a file in an allowed media directory")
    return real


def save_media_url(url: str, media_dir: Path, allowed: tuple[Path, ...] = ()) -> str:
    """A data URL to a file named by its hash (the same picture twice is one file)."""
    if url.startswith("file:"):
        return str(_allowed_file(url, allowed))
    if not url.startswith("data:") or "," not in url:
        raise WireError("bad request: media must be a data: URL (the server fetches nothing)")
    head, payload = url[5:].split(",", 1)
    if not head.endswith(";base64"):
        raise WireError("bad request: media data URLs must be base64")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise WireError("bad request: media data URL is not valid base64") from None
    mime = head[: -len(";base64")]
    ext = {"image/png": ".png", "image/jpeg": ".jpg", "video/mp4": ".mp4"}.get(mime, ".bin")
    private_dir(media_dir)
    path = media_dir / (hashlib.sha256(data).hexdigest()[:32] + ext)
    if not path.exists():
        with os.fdopen(open_private(path, os.O_WRONLY | os.O_TRUNC), "wb") as f:
            f.write(data)
    return str(path)
