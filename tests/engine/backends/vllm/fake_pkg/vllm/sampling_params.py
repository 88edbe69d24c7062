"""vLLM 0.33.0's SamplingParams: the same field names (checked against the real source) and the
same `_verify_args` rules, raising VLLMValidationError with vLLM's messages."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from vllm.exceptions import VLLMValidationError

_SAMPLING_EPS = 1e-5


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


@dataclass
class SamplingParams:
    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    watermarking: bool | None = None
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    prompt_logprob_token_ids: list[int] | None = None
    prompt_logprob_start: int | None = None
    logprob_token_ids: list[int] | None = None
    flat_logprobs: bool = False
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    stream_interval: int | None = None
    skip_clone: bool = False
    output_text_buffer_length: int = 0
    _eos_token_id: int | None = None
    _all_stop_token_ids: set[int] = field(default_factory=set)
    _watermarking_skipped: bool = False
    structured_outputs: Any = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    _bad_words_token_ids: list[list[int]] | None = None
    skip_reading_prefix_cache: bool | None = None
    thinking_token_budget: int | None = None
    repetition_detection: Any = None
    routed_experts_prompt_start: int = 0
    trace_decode_token_ids: list[int] | None = None

    def __post_init__(self) -> None:
        if self.seed == -1:
            self.seed = None
        if self.stop is None:
            self.stop = []
        elif isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop_token_ids = list(dict.fromkeys(self.stop_token_ids or []))
        self.bad_words = list(dict.fromkeys(self.bad_words or []))
        self._verify_args()
        if self.temperature < _SAMPLING_EPS:
            self.top_p, self.top_k, self.min_p = 1.0, 0, 0.0
            if self.n > 1:
                raise VLLMValidationError(f"n must be 1 when using greedy sampling, got {self.n}.")

    def _verify_args(self) -> None:  # vLLM's order and words
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise VLLMValidationError(
                f"presence_penalty must be in [-2, 2], got {self.presence_penalty}."
            )
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise VLLMValidationError(
                f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}."
            )
        if self.repetition_penalty <= 0.0:
            raise VLLMValidationError(
                f"repetition_penalty must be greater than zero, got {self.repetition_penalty}."
            )
        t = self.temperature
        if not math.isfinite(t):
            raise VLLMValidationError(
                f"temperature must be a finite number, got {t}.", parameter="temperature", value=t
            )
        if t < 0.0:
            raise VLLMValidationError(
                f"temperature must be non-negative, got {t}.", parameter="temperature", value=t
            )
        if t > 2.0:
            raise VLLMValidationError(
                f"temperature must be in [0, 2], got {t}.", parameter="temperature", value=t
            )
        if not 0.0 < self.top_p <= 1.0:
            raise VLLMValidationError(
                f"top_p must be in (0, 1], got {self.top_p}.", parameter="top_p", value=self.top_p
            )
        if self.top_k < -1:
            raise VLLMValidationError(
                f"top_k must be 0 (disable), or at least 1, got {self.top_k}."
            )
        if not isinstance(self.top_k, int):
            raise VLLMValidationError(f"top_k must be an integer, got {type(self.top_k).__name__}")
        if not 0.0 <= self.min_p <= 1.0:
            raise VLLMValidationError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise VLLMValidationError(
                f"max_tokens must be at least 1, got {self.max_tokens}.",
                parameter="max_tokens",
                value=self.max_tokens,
            )
        if any(not s for s in self.stop):
            raise VLLMValidationError("stop cannot contain an empty string.")
