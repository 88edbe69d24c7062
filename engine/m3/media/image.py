"""Images -> MediaInput (SPEC §5.1): Pillow decode, orientation, RGB, smart_resize, patches."""

from __future__ import annotations

import struct
import warnings
import zlib
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from .config import MediaConfig, MediaLimits
from .errors import MediaError
from .files import check_file
from .patches import frames_to_patches
from .resize import smart_resize
from .result import MediaInput

SUPPORTED_FORMATS = frozenset({"PNG", "JPEG", "MPO", "WEBP", "GIF", "BMP"})


def open_image(path: str | Path, limits: MediaLimits) -> Image.Image:
    """Open lazily (header only) and refuse unsupported formats and decompression bombs."""
    check_file(path, limits.max_file_bytes)
    try:
        # Pillow warns (89 MP) or raises (179 MP) on its own; our limit is lower and says why.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            img = Image.open(path)
    except Image.DecompressionBombError:
        raise MediaError(path, "image is too large (decompression bomb guard)") from None
    except UnidentifiedImageError:
        raise MediaError(path, "not a recognised image (corrupt or unsupported format)") from None
    except OSError as e:
        raise MediaError(path, f"cannot open image ({e})") from None
    except (ValueError, SyntaxError, EOFError, struct.error, zlib.error) as e:
        # Pillow's own guards and parse errors in the header chunks: a zTXt/iCCP chunk that
        # decompresses past MAX_TEXT_CHUNK is a ValueError, a broken chunk a SyntaxError.
        raise MediaError(path, f"corrupt or hostile image header ({e})") from None
    if img.format not in SUPPORTED_FORMATS:
        img.close()
        raise MediaError(
            path, f"image format {img.format} is not supported (PNG, JPEG, WebP, GIF, BMP)"
        )
    w, h = img.size
    if w * h > limits.max_source_pixels:
        img.close()
        raise MediaError(
            path,
            f"image is {w}x{h} = {w * h / 1e6:.1f} MP, above the limit of "
            f"{limits.max_source_pixels / 1e6:.1f} MP (not decoded)",
        )
    return img


def to_rgb(img: Image.Image) -> Image.Image:
    """Any Pillow mode -> RGB; transparency is flattened onto white (as transformers does)."""
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        # High bit depth greyscale: scale to 8 bits instead of clipping at 255.
        arr = np.asarray(img, dtype=np.float64)
        top = 65535.0 if img.mode.startswith("I;16") or arr.max() > 255 else 255.0
        arr = np.clip(arr * (255.0 / top), 0, 255).astype(np.uint8)
        img = Image.fromarray(arr, mode="L")
    has_alpha = img.mode in ("RGBA", "LA", "PA", "La", "RGBa") or (
        img.mode == "P" and "transparency" in img.info
    )
    if has_alpha:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def resize_frame(img: Image.Image, hw: tuple[int, int]) -> np.ndarray:
    h, w = hw
    if img.size != (w, h):
        img = img.resize((w, h), Image.Resampling.BICUBIC)
    return np.asarray(img, dtype=np.uint8)


def load_image(
    path: str | Path, cfg: MediaConfig | None = None, limits: MediaLimits | None = None
) -> MediaInput:
    """Decode, orient, flatten, resize and patchify one image. Errors are MediaError."""
    cfg = cfg or MediaConfig()
    limits = limits or MediaLimits()
    img = open_image(path, limits)
    try:
        img.seek(0)  # GIF / animated WebP: the first frame
        img = ImageOps.exif_transpose(img) or img
        rgb = to_rgb(img)
    except (OSError, SyntaxError, ValueError) as e:
        raise MediaError(path, f"corrupt or truncated image ({e})") from None
    finally:
        img.close()
    h, w = rgb.height, rgb.width
    try:
        hw = smart_resize(
            h,
            w,
            factor=cfg.factor,
            min_pixels=cfg.image_min_pixels,
            max_pixels=cfg.image_max_pixels,
            max_long_side=cfg.image_max_long_side,
        )
    except ValueError as e:
        raise MediaError(path, str(e)) from None
    frame = resize_frame(rgb, hw)
    pixel_values = frames_to_patches([frame], cfg)
    grid = (1, hw[0] // cfg.patch_size, hw[1] // cfg.patch_size)
    return MediaInput(
        kind="image",
        path=str(path),
        pixel_values=pixel_values,
        grid_thw=grid,
        num_tokens=grid[1] * grid[2] // (cfg.merge_size**2),
        resized_hw=hw,
        source_hw=(h, w),
    )
