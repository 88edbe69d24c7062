"""Images and videos for M3 (SPEC §5): CPU preprocessing shared by every backend."""

from m3agent.engine.m3.media.config import MediaConfig, MediaLimits
from m3agent.engine.m3.media.errors import MediaError
from m3agent.engine.m3.media.image import load_image
from m3agent.engine.m3.media.load import load_media
from m3agent.engine.m3.media.placeholders import (
    IMAGE_TOKEN,
    VIDEO_TOKEN,
    VISION_END,
    VISION_START,
    VisionTokenIds,
    expand_prompt_ids,
    expand_prompt_text,
)
from m3agent.engine.m3.media.result import MediaInput
from m3agent.engine.m3.media.sampling import sample_frame_indices
from m3agent.engine.m3.media.video import load_video, probe_video

__all__ = [
    "IMAGE_TOKEN",
    "VIDEO_TOKEN",
    "VISION_END",
    "VISION_START",
    "MediaConfig",
    "MediaError",
    "MediaInput",
    "MediaLimits",
    "VisionTokenIds",
    "expand_prompt_ids",
    "expand_prompt_text",
    "load_image",
    "load_media",
    "load_video",
    "probe_video",
    "sample_frame_indices",
]
