"""Does the configured model read images and videos? Known before the engine loads for a
local checkpoint (config.json's vision_config and the vision weights, as the native engine
decides), so /attach and --image refuse at once instead of an HTTP 400 at send time.
None when it cannot be told here (a remote server's model, the scripted engine)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from m3agent.engine.api import LOCAL_ENGINES

if TYPE_CHECKING:
    from .settings import Settings


def reads_media(settings: Settings) -> bool | None:
    if settings.engine not in LOCAL_ENGINES or not settings.model:
        return None
    path = Path(settings.model).expanduser()
    if not (path / "config.json").is_file():
        return None  # a hub id not downloaded yet: the engine will say
    from m3agent.engine.native.loaders.vision import wants_vision

    try:
        return wants_vision(path)
    except Exception:  # unreadable weights (or no torch for the header): the engine will say
        return None


def text_only_error(settings: Settings, what: str) -> str:
    model = settings.model or ""  # asked only once reads_media said False: a model is set
    return (
        f"{what}: {Path(model).name} is a text-only checkpoint (no vision tower): "
        "it cannot read images or videos"
    )
