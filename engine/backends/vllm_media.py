"""Images and videos for the vLLM backend: limits, loading, and the prompt length vLLM counts.

vLLM's input processor checks `max_model_len` against the prompt after each placeholder token
has grown into its item's vision tokens (plus wrappers and timestamps); `expanded_len` counts
the same, so a prompt whose text fits but whose images do not is refused before submission.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..api import EngineRequestError, EngineUnavailable, Message

if TYPE_CHECKING:
    from ..m3.media import MediaConfig, MediaInput
    from .vllm_args import EnginePlan


def media_items(
    messages: Sequence[Message], plan: EnginePlan, model_name: str, config: MediaConfig | None
) -> list[MediaInput]:
    """The request's media as loaded MediaInputs, in prompt order; [] for a text request."""
    parts = [p for m in messages if m.role in ("user", "tool") for p in m.media]
    if not parts:
        return []
    limits = plan.engine_args.get("limit_mm_per_prompt")
    if limits is None:
        raise EngineRequestError(
            f"{model_name} is served text-only (no vision tower loaded); "
            "start it with image/video limits above 0"
        )
    for kind in ("image", "video"):
        n = sum(1 for p in parts if p.kind == kind)
        if n > limits[kind]:
            raise EngineRequestError(f"{n} {kind}s in one request; the limit is {limits[kind]}")
    from ..m3.media import load_media

    try:
        return [load_media(p, config) for p in parts]
    except OSError as e:  # MediaError is an EngineRequestError and passes as it is
        raise EngineRequestError(f"cannot read media: {e.strerror or e}") from None


def expanded_len(
    ids: Sequence[int], items: Sequence[MediaInput], encode: Callable[[str], list[int]]
) -> int:
    """Prompt length once every placeholder id stands for its item's full token run."""
    if not items:
        return len(ids)
    from ..m3.media.placeholders import prompt_token_count

    return len(ids) + sum(prompt_token_count(item, encode) - 1 for item in items)


def media_config_of(path: Path) -> MediaConfig:
    """The checkpoint's preprocessing (preprocessor_config.json), else M3's defaults."""
    from ..m3.media import MediaConfig

    pre = path / "preprocessor_config.json"
    if pre.is_file():
        try:
            return MediaConfig.from_preprocessor_config(json.loads(pre.read_text()))
        except (OSError, ValueError) as e:
            raise EngineUnavailable(f"{pre} is unreadable: {e}") from None
    return MediaConfig()
