"""`smart_resize`: the target size of an image or video frame (SPEC §5.1, Qwen-VL style).

Written to reproduce vLLM's vendored processor bit for bit, including Python's round-half-even
in `round(x / factor)` and the float path of `sqrt`, because token counts depend on it.
"""

from __future__ import annotations

import math

MAX_ASPECT_RATIO = 200
MIN_SHORT_SIDE = 112  # long-side mode: the short side is enlarged to at least this
IMAGE_MAX_TOTAL_PIXELS = 3584 * 3584  # long-side mode: area cap that raises


def _round(x: float, factor: int) -> int:
    return round(x / factor) * factor


def _floor(x: float, factor: int) -> int:
    return math.floor(x / factor) * factor


def _ceil(x: float, factor: int) -> int:
    return math.ceil(x / factor) * factor


def smart_resize(
    height: int,
    width: int,
    *,
    factor: int = 28,
    min_pixels: int = 4 * 28 * 28,
    max_pixels: int = 672 * 672,
    max_long_side: int | None = None,
    max_total_pixels: int | None = IMAGE_MAX_TOTAL_PIXELS,
) -> tuple[int, int]:
    """(height, width) -> resized (height, width), both multiples of `factor`.

    Raises ValueError for an aspect ratio above 200 or, in long-side mode, an area above
    `max_total_pixels` (that mode refuses rather than shrinks further).
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"image has no pixels ({width}x{height})")
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise ValueError(f"aspect ratio {ratio:.0f}:1 is above the model's limit of 200:1")
    if max_long_side is not None:
        return _by_long_side(height, width, factor, max_long_side, max_total_pixels)
    h_bar = max(factor, _round(height, factor))
    w_bar = max(factor, _round(width, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = _floor(height / beta, factor)
        w_bar = _floor(width / beta, factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = _ceil(height * beta, factor)
        w_bar = _ceil(width * beta, factor)
    return h_bar, w_bar


def _by_long_side(
    height: int, width: int, factor: int, max_long_side: int, max_total_pixels: int | None
) -> tuple[int, int]:
    # The two branches test the *original* sides and exclude each other, as in vLLM.
    scaled_h: float = height
    scaled_w: float = width
    if max(height, width) > max_long_side:
        beta = max_long_side / max(height, width)
        scaled_h, scaled_w = height * beta, width * beta
    elif min(height, width) < MIN_SHORT_SIDE:
        beta = MIN_SHORT_SIDE / min(height, width)
        scaled_h, scaled_w = height * beta, width * beta
    h_bar = max(factor, _round(scaled_h, factor))
    w_bar = max(factor, _round(scaled_w, factor))
    if max_total_pixels is not None and h_bar * w_bar > max_total_pixels:
        raise ValueError(
            f"resized area {h_bar * w_bar} is above the long-side mode cap of {max_total_pixels}"
        )
    return h_bar, w_bar


def tokens_for_size(height: int, width: int, factor: int = 28) -> int:
    """Merged vision tokens of one resized frame (or 2-frame group): H'·W' / factor²."""
    return (height // factor) * (width // factor)
