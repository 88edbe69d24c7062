"""Images and videos for the native backend: each request's media inputs.

`NativeMedia` belongs to one NativeEngine. Per request it preprocesses every media part of the
user messages on the CPU (engine/m3/media, SPEC §5), expands each placeholder token of the
rendered prompt into its wrapped run (SPEC §1.9) and pins the items to their placeholder
positions (`MultiModalInputs`, whose media hashes salt the prefix-cache block hashes).
A conversation resends every earlier attachment each turn, so preprocessed items are cached
by (path, mtime, size): a multi-turn session decodes a video once.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..api import EngineRequestError, EngineUnavailable, MediaPart, Message
from ..m3.media.config import MediaConfig, MediaLimits
from ..m3.media.load import load_media
from ..m3.media.placeholders import VisionTokenIds, expand_prompt_ids
from ..m3.media.result import MediaInput

if TYPE_CHECKING:
    from ..native.runner.mm_inputs import MultiModalInputs

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024  # pixel_values kept for later turns (float32 patches)


def media_config_for(model_dir: Path) -> MediaConfig:
    """The checkpoint's preprocessor_config.json overrides, else M3's defaults."""
    pre = model_dir / "preprocessor_config.json"
    if not pre.is_file():
        return MediaConfig()
    try:
        return MediaConfig.from_preprocessor_config(json.loads(pre.read_text()))
    except (OSError, ValueError, TypeError) as e:
        raise EngineUnavailable(f"{pre} is unusable: {e}") from None


class MediaCache:
    """Least-recently-used MediaInputs by file identity, bounded by their pixel bytes."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError("media cache size must be >= 0")
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, str, int, int], MediaInput] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # requests preprocess in worker threads
        self.hits = 0
        self.misses = 0

    def get_or_load(self, part: MediaPart, load: Callable[[MediaPart], MediaInput]) -> MediaInput:
        try:
            st = os.stat(part.path)
        except OSError:
            return load(part)  # the loader names the problem (not found, permission, ...)
        key = (part.kind, os.path.realpath(part.path), st.st_mtime_ns, st.st_size)
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return item
            self.misses += 1
        item = load(part)  # outside the lock: a long video must not stall other requests
        size = item.pixel_values.nbytes
        if size > self.max_bytes:
            return item
        with self._lock:
            if key not in self._items:
                self._items[key] = item
                self._bytes += size
            while self._bytes > self.max_bytes:
                _, old = self._items.popitem(last=False)
                self._bytes -= old.pixel_values.nbytes
        return item


class NativeMedia:
    def __init__(
        self,
        ids: VisionTokenIds,
        encode: Callable[[str], list[int]],
        config: MediaConfig | None = None,
        limits: MediaLimits | None = None,
        cache: MediaCache | None = None,
    ) -> None:
        self.ids = ids
        self._encode = encode  # timestamp text is tokenised as ordinary prompt text
        self.config = config or MediaConfig()
        self.limits = limits or MediaLimits()
        self.cache = cache if cache is not None else MediaCache()

    @classmethod
    def for_checkpoint(cls, model_dir: Path, tokenizer: Any) -> NativeMedia:
        try:
            ids = VisionTokenIds.from_vocab(tokenizer.token_to_id)
        except ValueError as e:
            raise EngineUnavailable(f"{model_dir} has a vision tower but {e}") from None
        return cls(ids, tokenizer.encode, media_config_for(model_dir))

    def prepare(
        self, messages: Sequence[Message], prompt_ids: Sequence[int]
    ) -> tuple[list[int], MultiModalInputs]:
        """(expanded prompt ids, MultiModalInputs) for a rendered prompt; errors are one line."""
        from ..native.runner.mm_inputs import MultiModalInputs

        parts = attached_parts(messages)
        for kind, limit in (("image", self.limits.max_images), ("video", self.limits.max_videos)):
            n = sum(1 for p in parts if p.kind == kind)
            if n > limit:
                raise EngineRequestError(f"{n} {kind}s in one request; the limit is {limit}")
        items = [self.cache.get_or_load(p, self._load) for p in parts]
        try:
            expanded = expand_prompt_ids(prompt_ids, items, self.ids, self._encode)
            return expanded, MultiModalInputs.build(expanded, items, self.ids)
        except ValueError as e:  # a custom chat template that drops or adds placeholders
            raise EngineRequestError(
                f"media placeholders do not match the attachments: {e}"
            ) from None

    def _load(self, part: MediaPart) -> MediaInput:
        try:
            return load_media(part, self.config, self.limits)
        except OSError as e:  # MediaError is an EngineRequestError and passes as it is
            name = Path(part.path).name
            raise EngineRequestError(f"{name}: cannot read ({e.strerror or e})") from None
        except ValueError as e:  # a decoder's odd stream the loaders did not word themselves
            raise EngineRequestError(f"{Path(part.path).name}: unusable ({e})") from None


def attached_parts(messages: Sequence[Message]) -> list[MediaPart]:
    """Media parts in prompt order; the chat template places them in user and tool messages."""
    return [p for m in messages if m.role in ("user", "tool") for p in m.media]
