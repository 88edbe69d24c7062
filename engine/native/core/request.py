"""One generation request as the scheduler and the KV cache manager see it."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...api import SamplingParams

if TYPE_CHECKING:
    from ..runner.mm_inputs import MultiModalInputs


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_LENGTH = "finished_length"
    FINISHED_ABORTED = "finished_aborted"

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = {
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH,
    RequestStatus.FINISHED_ABORTED,
}


@dataclass(slots=True)
class RequestTimings:
    arrival: float
    first_scheduled: float | None = None
    first_token: float | None = None
    finished: float | None = None


@dataclass(slots=True)
class Request:
    """Mutable state owned by the engine loop's thread; nothing else writes it."""

    request_id: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    eos_token_ids: tuple[int, ...] = ()
    output_token_ids: list[int] = field(default_factory=list)
    status: RequestStatus = RequestStatus.WAITING
    # Tokens whose K/V (and index keys) are in the cache; prefix hits count as computed.
    num_computed_tokens: int = 0
    # Prompt tokens served by a prefix-cache hit the first time this request was scheduled.
    num_cached_tokens: int = -1
    # Of those, the tokens whose pages were read back from a lower tier (the disk).
    num_restored_tokens: int = 0
    num_preemptions: int = 0
    # Chained hashes of this request's full 128-token blocks, grown as tokens arrive.
    block_hashes: list[bytes] = field(default_factory=list)
    stop_reason: int | str | None = None
    # images/videos (mm_inputs.MultiModalInputs): salts block hashes, feeds the vision tower
    mm_inputs: MultiModalInputs | None = None
    timings: RequestTimings = field(default_factory=lambda: RequestTimings(time.monotonic()))

    def __post_init__(self) -> None:
        if not self.prompt_token_ids:
            raise ValueError(f"request {self.request_id!r} has an empty prompt")

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_slice(self, start: int, end: int) -> list[int]:
        n = len(self.prompt_token_ids)
        if end <= n:
            return self.prompt_token_ids[start:end]
        if start >= n:
            return self.output_token_ids[start - n : end - n]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - n]

    def append_output_token(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)

    @property
    def is_finished(self) -> bool:
        return self.status.finished
