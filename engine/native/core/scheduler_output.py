"""What the scheduler decided for one step, in the order the model runner lays out the batch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ScheduledRequest:
    request_id: str
    token_ids: tuple[int, ...]  # the tokens computed this step
    num_computed_tokens: int  # context already in the cache (this step's context_len)
    block_ids: tuple[int, ...]  # the request's whole block table
    samples: bool  # this step reaches the request's last known token: sample the next one

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    # Decode-shaped rows (one new token) first, then prefill chunks, as AttentionMetadata wants.
    scheduled: tuple[ScheduledRequest, ...]
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    num_decodes: int
    preempted_req_ids: tuple[str, ...] = ()
    new_req_ids: tuple[str, ...] = ()  # scheduled for the first time (or again after preemption)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled
