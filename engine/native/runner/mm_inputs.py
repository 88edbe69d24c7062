"""A request's images and videos as the native runtime sees them, and their vision rows.

`MultiModalInputs` pins each preprocessed item to its placeholder tokens in the prompt and
names its content by hash, so that prefix caching never confuses two images behind the same
placeholder ids. `VisionEmbedder` runs the vision tower once per request (lazily, at the
first prefill chunk that needs it) and overwrites the placeholder rows of each step's input
embeddings; wrapper and timestamp tokens keep their text embeddings.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ...m3.media.placeholders import VisionTokenIds
from ...m3.media.result import MediaInput
from ..core.block_hash import BlockHashFn
from ..core.scheduler_output import SchedulerOutput


def media_hash(item: MediaInput) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    h.update(repr((item.kind, item.grid_thw, item.timestamps)).encode())
    h.update(item.pixel_values.tobytes())
    return h.digest()


@dataclass(frozen=True, slots=True, eq=False)
class MultiModalInputs:
    items: tuple[MediaInput, ...]  # in the order of their placeholders in the prompt
    positions: tuple[int, ...]  # prompt positions of every image/video placeholder token
    starts: tuple[int, ...]  # first placeholder position of each item
    hashes: tuple[bytes, ...]

    @classmethod
    def build(
        cls, prompt_ids: Sequence[int], items: Sequence[MediaInput], ids: VisionTokenIds
    ) -> MultiModalInputs:
        """From an *expanded* prompt (see placeholders.expand_prompt_ids) and its items."""
        images = [m for m in items if m.kind == "image"]
        videos = [m for m in items if m.kind == "video"]
        ordered: list[MediaInput] = []
        starts: list[int] = []
        positions: list[int] = []
        need = 0  # placeholder tokens still owed to the current item
        for pos, tid in enumerate(prompt_ids):
            if tid not in (ids.image, ids.video):
                continue
            positions.append(pos)
            if need == 0:
                pool = images if tid == ids.image else videos
                if not pool:
                    raise ValueError("the prompt has more media placeholders than items")
                ordered.append(pool.pop(0))
                starts.append(pos)
                need = ordered[-1].num_tokens
            need -= 1
        if need or images or videos:
            raise ValueError("media placeholders in the prompt do not match the attached items")
        return cls(
            tuple(ordered), tuple(positions), tuple(starts), tuple(media_hash(m) for m in ordered)
        )

    def block_extra_keys(self, block_index: int, block_size: int) -> tuple[bytes, ...]:
        """Hashes of the items that start before this block ends (chained, so cumulative)."""
        end = (block_index + 1) * block_size
        return self.hashes[: bisect_left(self.starts, end)]

    def rows_in(self, start: int, end: int) -> tuple[int, int]:
        """[a, b): vision rows of the placeholder tokens at prompt positions [start, end)."""
        return bisect_left(self.positions, start), bisect_left(self.positions, end)


def extend_block_hashes_mm(
    block_hashes: list[bytes],
    token_ids: Sequence[int],
    block_size: int,
    hash_fn: BlockHashFn,
    mm: MultiModalInputs,
) -> None:
    """Like block_hash.extend_block_hashes, with each block salted by the media before it."""
    for i in range(len(block_hashes), len(token_ids) // block_size):
        parent = block_hashes[i - 1] if i else None
        tokens = token_ids[i * block_size : (i + 1) * block_size]
        block_hashes.append(hash_fn(parent, tokens, mm.block_extra_keys(i, block_size)))


class VisionEmbedder:
    def __init__(self, tower: torch.nn.Module, device: torch.device | str = "cpu"):
        self.tower = tower
        self.device = torch.device(device)
        self._mm: dict[str, MultiModalInputs] = {}
        self._rows: dict[str, torch.Tensor] = {}

    def add_request(self, request_id: str, mm: MultiModalInputs) -> None:
        self._mm[request_id] = mm

    def remove_request(self, request_id: str) -> None:
        self._mm.pop(request_id, None)
        self._rows.pop(request_id, None)

    def _vision_rows(self, request_id: str) -> torch.Tensor:
        if request_id not in self._rows:
            mm = self._mm[request_id]
            dtype = next(self.tower.parameters()).dtype
            pv = torch.cat([torch.from_numpy(m.pixel_values) for m in mm.items])
            with torch.inference_mode():
                self._rows[request_id] = self.tower(
                    pv.to(self.device, dtype), [m.grid_thw for m in mm.items]
                )
        return self._rows[request_id]

    def needs(self, out: SchedulerOutput) -> bool:
        return any(row.request_id in self._mm for row in out.scheduled)

    def merge(self, out: SchedulerOutput, embeds: torch.Tensor) -> torch.Tensor:
        """Overwrite placeholder rows of `embeds` [T, D] (laid out as out.scheduled)."""
        embeds = embeds.clone()
        offset = 0
        for row in out.scheduled:
            mm = self._mm.get(row.request_id)
            start = row.num_computed_tokens
            if mm is not None:
                a, b = mm.rows_in(start, start + row.num_tokens)
                if b > a:
                    rows = self._vision_rows(row.request_id)
                    local = torch.tensor(mm.positions[a:b], device=embeds.device) - start
                    embeds[offset + local] = rows[a:b].to(embeds.dtype)
                if mm.positions and start + row.num_tokens > mm.positions[-1]:
                    self._rows.pop(row.request_id, None)  # prompt's media all in the cache
            offset += row.num_tokens
        return embeds
