"""The prompt side of media (SPEC §1.9, §5.3): placeholder strings, their expansion, token ids.

A prompt holds one `]<]image[>[` per image and one `]<]video[>[` per video (the chat template
puts them there). Expansion replaces each, in order, by the wrapped run of N placeholder
tokens; videos repeat that per temporal group, each preceded by its timestamp text, and
reuse the *image* start/end tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .result import MediaInput

IMAGE_TOKEN = "]<]image[>["
VIDEO_TOKEN = "]<]video[>["
VISION_START = "]<]start of image[>["
VISION_END = "]<]end of image[>["


def timestamp_text(seconds: float) -> str:
    return f"]<]{seconds:.1f} seconds[>["


@dataclass(frozen=True, slots=True)
class VisionTokenIds:
    """Ids of the four special tokens. Defaults are the ids seen in public tests [3P]."""

    image: int = 200025
    video: int = 200026
    start: int = 200029
    end: int = 200030

    @classmethod
    def from_vocab(cls, token_to_id: Callable[[str], int | None]) -> VisionTokenIds:
        """From a tokenizer's lookup (e.g. `tokenizers.Tokenizer.token_to_id`)."""
        ids = {}
        for field, text in (
            ("image", IMAGE_TOKEN),
            ("video", VIDEO_TOKEN),
            ("start", VISION_START),
            ("end", VISION_END),
        ):
            tid = token_to_id(text)
            if tid is None:
                raise ValueError(f"the tokenizer has no special token {text!r}")
            ids[field] = tid
        return cls(**ids)


def expansion_text(item: MediaInput) -> str:
    """What one placeholder becomes in the prompt text."""
    if item.kind == "image":
        return VISION_START + IMAGE_TOKEN * item.num_tokens + VISION_END
    per_group = item.tokens_per_group
    parts = []
    for t in range(item.grid_thw[0]):
        if item.timestamps:
            parts.append(timestamp_text(item.timestamps[t]))
        parts.append(VISION_START + VIDEO_TOKEN * per_group + VISION_END)
    return "".join(parts)


def expand_prompt_text(text: str, items: Sequence[MediaInput]) -> str:
    """Replace the k-th image (video) placeholder by the k-th image (video) item's expansion."""
    images = [m for m in items if m.kind == "image"]
    videos = [m for m in items if m.kind == "video"]
    n_img, n_vid = text.count(IMAGE_TOKEN), text.count(VIDEO_TOKEN)
    if n_img != len(images) or n_vid != len(videos):
        raise ValueError(
            f"prompt has {n_img} image and {n_vid} video placeholders for "
            f"{len(images)} images and {len(videos)} videos"
        )
    out: list[str] = []
    i = v = pos = 0
    while True:
        a, b = text.find(IMAGE_TOKEN, pos), text.find(VIDEO_TOKEN, pos)
        if a < 0 and b < 0:
            out.append(text[pos:])
            return "".join(out)
        if b < 0 or 0 <= a < b:
            out.append(text[pos:a] + expansion_text(images[i]))
            i, pos = i + 1, a + len(IMAGE_TOKEN)
        else:
            out.append(text[pos:b] + expansion_text(videos[v]))
            v, pos = v + 1, b + len(VIDEO_TOKEN)


def expansion_ids(
    item: MediaInput, ids: VisionTokenIds, encode: Callable[[str], list[int]]
) -> list[int]:
    """Token ids of one expansion; `encode` tokenises the timestamp text normally."""
    if item.kind == "image":
        return [ids.start] + [ids.image] * item.num_tokens + [ids.end]
    out: list[int] = []
    for t in range(item.grid_thw[0]):
        if item.timestamps:
            out += encode(timestamp_text(item.timestamps[t]))
        out += [ids.start] + [ids.video] * item.tokens_per_group + [ids.end]
    return out


def expand_prompt_ids(
    token_ids: Sequence[int],
    items: Sequence[MediaInput],
    ids: VisionTokenIds,
    encode: Callable[[str], list[int]],
) -> list[int]:
    """The token-level expansion (what vLLM's prompt update does): one id in, the run out."""
    images = iter([m for m in items if m.kind == "image"])
    videos = iter([m for m in items if m.kind == "video"])
    out: list[int] = []
    try:
        for tid in token_ids:
            if tid == ids.image:
                out += expansion_ids(next(images), ids, encode)
            elif tid == ids.video:
                out += expansion_ids(next(videos), ids, encode)
            else:
                out.append(tid)
    except StopIteration:
        raise ValueError("the prompt has more media placeholders than attached items") from None
    if next(images, None) is not None or next(videos, None) is not None:
        raise ValueError("the prompt has fewer media placeholders than attached items")
    return out


def prompt_token_count(item: MediaInput, encode: Callable[[str], list[int]]) -> int:
    """Prompt tokens one item costs: vision tokens + wrappers (+ timestamp text tokens)."""
    return len(expansion_ids(item, VisionTokenIds(), encode))


def items_in_prompt_order(
    token_ids: Sequence[int], items: Sequence[MediaInput], ids: VisionTokenIds
) -> list[MediaInput]:
    """Items in the order their placeholders appear in the (unexpanded) prompt ids.

    The k-th image placeholder belongs to the k-th image item, likewise for videos; the
    vision tower's output rows must follow this interleaved order.
    """
    images = iter([m for m in items if m.kind == "image"])
    videos = iter([m for m in items if m.kind == "video"])
    order: list[MediaInput] = []
    for tid in token_ids:
        if tid == ids.image:
            order.append(next(images))
        elif tid == ids.video:
            order.append(next(videos))
    return order
