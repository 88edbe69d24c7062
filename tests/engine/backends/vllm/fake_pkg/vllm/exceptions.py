"""vLLM 0.33.0's exception hierarchy (vllm/exceptions.py), same names and __str__."""

from __future__ import annotations

from typing import Any


class VLLMError(Exception):
    pass


class VLLMClientError(VLLMError):
    pass


class VLLMServerError(VLLMError):
    pass


class VLLMValidationError(VLLMClientError):
    def __init__(self, message: str, *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.value = value

    def __str__(self) -> str:
        base = super().__str__()
        extras = []
        if self.parameter is not None:
            extras.append(f"parameter={self.parameter}")
        if self.value is not None:
            extras.append(f"value={self.value}")
        return f"{base} ({', '.join(extras)})" if extras else base
