"""Our SamplingParams checked by vLLM 0.33's own rules, before anything is submitted.

vLLM's `SamplingParams._verify_args` raises `VLLMValidationError` for these; checking them
here first gives the same words without building a request (and without vllm installed, so
the rules are testable anywhere). The messages are vLLM's, so a user who searches for one
finds vLLM's documentation.
"""

from __future__ import annotations

import math

from ..api import EngineRequestError, SamplingParams


def vllm_sampling_error(s: SamplingParams) -> str | None:
    """vLLM's message for the first rule `s` breaks, None when it passes."""
    if not math.isfinite(s.temperature):
        return f"temperature must be a finite number, got {s.temperature}."
    if s.temperature < 0.0:
        return f"temperature must be non-negative, got {s.temperature}."
    if s.temperature > 2.0:
        return f"temperature must be in [0, 2], got {s.temperature}."
    if not 0.0 < s.top_p <= 1.0:
        return f"top_p must be in (0, 1], got {s.top_p}."
    if s.top_k < -1:
        return f"top_k must be 0 (disable), or at least 1, got {s.top_k}."
    if not isinstance(s.top_k, int):
        return f"top_k must be an integer, got {type(s.top_k).__name__}"
    if s.max_tokens is not None and s.max_tokens < 1:
        return f"max_tokens must be at least 1, got {s.max_tokens}."
    if any(not stop for stop in s.stop):
        return "stop cannot contain an empty string."
    return None


def check_sampling(s: SamplingParams) -> None:
    message = vllm_sampling_error(s)
    if message is not None:
        raise EngineRequestError(f"vLLM rejected the request: {message}")
