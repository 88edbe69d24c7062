"""The native engine's sampling: engine/api.py's SamplingParams, greedy unless asked otherwise,
and the rules the engine checks a request's values against."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...api import SamplingParams

# What LLMEngine.generate/add_request use without params (vLLM's LLM.generate: 16 tokens).
GREEDY = SamplingParams(max_tokens=256, temperature=0.0, top_p=1.0, top_k=0)


def native_params(**changes: Any) -> SamplingParams:
    """GREEDY with some fields changed: `native_params(max_tokens=8, ignore_eos=True)`."""
    return replace(GREEDY, **changes)


def sampling_error(s: SamplingParams) -> str | None:
    """The first rule `s` breaks for the native sampler, None when it passes."""
    if s.max_tokens < 1:
        return f"max_tokens must be at least 1, got {s.max_tokens}"
    if s.temperature < 0:
        return f"temperature must be >= 0, got {s.temperature}"
    if not 0.0 < s.top_p <= 1.0:
        return f"top_p must be in (0, 1], got {s.top_p}"
    if s.top_k < -1:
        return f"top_k must be -1, 0 (off) or positive, got {s.top_k}"
    if any(not stop for stop in s.stop):
        return "stop strings must not be empty"
    return None
