"""What the engine reports about a request after each step."""

from __future__ import annotations

from dataclasses import dataclass

# The one finish-reason vocabulary (engine/api.py); native reports stop, length, abort, error.
from ...api import FinishReason


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    arrival_time: float
    first_scheduled_time: float | None
    first_token_time: float | None
    finished_time: float | None

    @property
    def time_to_first_token_s(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def total_time_s(self) -> float | None:
        if self.finished_time is None:
            return None
        return self.finished_time - self.arrival_time


@dataclass(frozen=True, slots=True)
class RequestOutput:
    request_id: str
    new_token_ids: tuple[int, ...]  # tokens sampled in this step
    new_text: str  # text released in this step (stop-string look-ahead may hold some back)
    token_ids: tuple[int, ...]  # every generated token so far
    text: str  # the released text so far
    finished: bool
    finish_reason: FinishReason | None
    stop_reason: int | str | None  # the stop token id or stop string that ended it
    num_prompt_tokens: int
    num_cached_tokens: int  # prompt tokens served from the prefix cache
    metrics: RequestMetrics
    error: str | None = None  # one line, when finish_reason == "error"
    num_restored_tokens: int = 0  # of num_cached_tokens, read back from the disk tier
    num_host_tokens: int = 0  # of num_cached_tokens, the others' pages in the host tier

    @property
    def num_generated_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True, slots=True)
class PrefillStep:
    """A request's prompt after one step that computed part of it (chunked prefill)."""

    request_id: str
    num_computed_tokens: int  # of the prompt, cached pages included
    num_prompt_tokens: int
    num_cached_tokens: int
    elapsed_s: float  # since the request was first scheduled
