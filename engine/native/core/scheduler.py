"""One token budget per step. Running requests go first (decodes cost 1, unfinished prefills
their remaining chunk), then waiting requests, until the budget or max_num_seqs runs out:
chunked prefill and decode are the same subtraction. When pages run out, the most recently
admitted running request is preempted and will be recomputed from scratch (its prefix may
still hit the cache).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from .block_pool import KVCacheBlock
from .engine_config import require_at_least
from .kv_cache_manager import KVCacheManager
from .request import Request, RequestStatus
from .scheduler_output import ScheduledRequest, SchedulerOutput


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 64
    max_model_len: int = 4096
    enable_chunked_prefill: bool = True

    def __post_init__(self) -> None:
        require_at_least("max_num_batched_tokens", self.max_num_batched_tokens, 1)
        require_at_least("max_num_seqs", self.max_num_seqs, 1)
        require_at_least("max_model_len", self.max_model_len, 2)


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv_cache_manager: KVCacheManager) -> None:
        self.config = config
        self.kv = kv_cache_manager
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.num_preemptions = 0

    # ---- requests in and out ------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        if request.request_id in self.requests:
            raise ValueError(f"request id {request.request_id!r} is already in the engine")
        self.requests[request.request_id] = request
        self.waiting.append(request)

    def finish_request(self, request_id: str, status: RequestStatus) -> Request | None:
        """Ends a request (abort or stop); frees its pages. Unknown ids are ignored."""
        request = self.requests.pop(request_id, None)
        if request is None:
            return None
        if request.status == RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        request.status = status
        request.timings.finished = time.monotonic()
        self.kv.free(request)
        return request

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    # ---- one step -----------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        budget = self.config.max_num_batched_tokens
        num_scheduled: dict[str, int] = {}
        preempted: list[Request] = []
        new_ids: list[str] = []

        i = 0
        while i < len(self.running) and budget > 0:
            request = self.running[i]
            n = min(request.num_tokens - request.num_computed_tokens, budget)
            if n <= 0:  # cannot happen after a sample; guard against a stuck request anyway
                i += 1
                continue
            while self.kv.allocate_slots(request, n) is None:
                victim = self.running.pop()
                self._preempt(victim)
                preempted.append(victim)
                num_scheduled.pop(victim.request_id, None)
                if victim is request:
                    break
            else:
                num_scheduled[request.request_id] = n
                budget -= n
                i += 1
                continue
            break  # the request itself was preempted: nothing after it can run either

        if not preempted:
            while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
                request = self.waiting[0]
                hits: list[KVCacheBlock] = []
                num_hit_tokens = 0
                if request.num_computed_tokens == 0:
                    hits, num_hit_tokens = self.kv.get_computed_blocks(request)
                remaining = request.num_tokens - request.num_computed_tokens - num_hit_tokens
                if not self.config.enable_chunked_prefill and remaining > budget:
                    break
                n = min(remaining, budget)
                if self.kv.allocate_slots(request, n, hits) is None:
                    break
                self.waiting.popleft()
                request.num_computed_tokens += num_hit_tokens
                if request.num_cached_tokens < 0:
                    request.num_cached_tokens = num_hit_tokens
                if request.timings.first_scheduled is None:
                    request.timings.first_scheduled = time.monotonic()
                request.status = RequestStatus.RUNNING
                self.running.append(request)
                num_scheduled[request.request_id] = n
                new_ids.append(request.request_id)
                budget -= n

        return self._build_output(num_scheduled, preempted, new_ids)

    def _preempt(self, request: Request) -> None:
        self.kv.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(request)

    def _build_output(
        self, num_scheduled: dict[str, int], preempted: list[Request], new_ids: list[str]
    ) -> SchedulerOutput:
        rows = []
        for request in self.running:
            n = num_scheduled.get(request.request_id)
            if n is None:
                continue
            start = request.num_computed_tokens
            rows.append(
                ScheduledRequest(
                    request_id=request.request_id,
                    token_ids=tuple(request.token_slice(start, start + n)),
                    num_computed_tokens=start,
                    block_ids=self.kv.get_block_ids(request.request_id),
                    samples=start + n == request.num_tokens,
                )
            )
        rows.sort(key=lambda r: r.num_tokens != 1)  # stable: decode-shaped rows first
        return SchedulerOutput(
            scheduled=tuple(rows),
            num_scheduled_tokens=num_scheduled,
            total_num_scheduled_tokens=sum(num_scheduled.values()),
            num_decodes=sum(1 for r in rows if r.num_tokens == 1),
            preempted_req_ids=tuple(r.request_id for r in preempted),
            new_req_ids=tuple(new_ids),
        )

    def update_from_output(self, output: SchedulerOutput, sampled: dict[str, int]) -> list[Request]:
        """Advances computed counts, appends sampled tokens, indexes newly full blocks.

        Returns the requests that received a token; stop checks are the engine's job.
        """
        advanced = []
        for row in output.scheduled:
            request = self.requests.get(row.request_id)
            if request is None:
                continue
            request.num_computed_tokens += row.num_tokens
            self.kv.cache_blocks(request)
            token = sampled.get(row.request_id)
            if token is not None:
                request.append_output_token(token)
                if request.timings.first_token is None:
                    request.timings.first_token = time.monotonic()
                advanced.append(request)
        return advanced
