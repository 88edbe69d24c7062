"""The one error type of media preprocessing: a bad attachment, said in one line."""

from __future__ import annotations

from pathlib import Path

from ...api import EngineRequestError


class MediaError(EngineRequestError):
    """An image or video cannot be used; the message names the file and the cause."""

    def __init__(self, path: str | Path, cause: str):
        self.path = str(path)
        self.cause = cause
        super().__init__(f"{Path(path).name}: {cause}")
