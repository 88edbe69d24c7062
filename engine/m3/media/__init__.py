"""Images and videos for M3 (SPEC §5): CPU preprocessing shared by every backend."""

from .config import MediaConfig, MediaLimits
from .errors import MediaError
from .image import load_image
from .load import load_media
from .placeholders import (
    IMAGE_TOKEN,
    VIDEO_TOKEN,
    VISION_END,
    VISION_START,
    VisionTokenIds,
    expand_prompt_ids,
    expand_prompt_text,
)
from .result import MediaInput
from .sampling import sample_frame_indices
from .video import load_video, probe_video

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
