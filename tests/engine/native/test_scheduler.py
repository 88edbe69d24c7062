"""Scheduler decisions, checked step by step without a model (tokens sampled are made up)."""

from __future__ import annotations

from m3agent.engine.native.core.kv_cache_manager import KVCacheManager
from m3agent.engine.native.core.request import Request, RequestStatus
from m3agent.engine.native.core.sampling_params import native_params
from m3agent.engine.native.core.scheduler import Scheduler, SchedulerConfig


def make(budget=512, seqs=8, blocks=64, max_len=8192) -> Scheduler:
    return Scheduler(
        SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=seqs, max_model_len=max_len),
        KVCacheManager(blocks),
    )


def req(rid: str, n: int, base: int = 0) -> Request:
    return Request(rid, [base + i % 50 + 2 for i in range(n)], native_params(max_tokens=100))


def step(s: Scheduler):
    out = s.schedule()
    s.update_from_output(out, {r.request_id: 7 for r in out.scheduled if r.samples})
    return out


def test_decodes_and_prefill_chunks_share_one_budget():
    s = make(budget=300)
    s.add_request(req("a", 100))
    s.add_request(req("b", 150, base=1000))
    out = step(s)
    assert out.num_scheduled_tokens == {"a": 100, "b": 150}
    assert all(r.samples for r in out.scheduled)
    s.add_request(req("c", 1000, base=2000))
    out = step(s)
    # Two decodes cost 2, the new prompt gets the remaining 298 as a chunk.
    assert out.num_scheduled_tokens == {"a": 1, "b": 1, "c": 298}
    assert out.num_decodes == 2 and [r.request_id for r in out.scheduled] == ["a", "b", "c"]
    assert not out.scheduled[2].samples and out.scheduled[2].num_computed_tokens == 0
    out = step(s)
    assert out.num_scheduled_tokens == {"a": 1, "b": 1, "c": 298}
    assert out.scheduled[2].num_computed_tokens == 298
    assert out.scheduled[2].token_ids == tuple(s.requests["c"].prompt_token_ids[298:596])
    out = step(s)
    out = step(s)
    assert out.num_scheduled_tokens == {"a": 1, "b": 1, "c": 1000 - 3 * 298}
    assert out.scheduled[2].samples
    assert s.requests["c"].output_token_ids == [7]
    assert out.total_num_scheduled_tokens == 2 + 106


def test_max_num_seqs_limits_admission():
    s = make(seqs=2)
    for i in range(3):
        s.add_request(req(f"r{i}", 10, base=100 * i))
    out = step(s)
    assert sorted(out.num_scheduled_tokens) == ["r0", "r1"]
    s.finish_request("r0", RequestStatus.FINISHED_STOPPED)
    out = step(s)
    assert out.num_scheduled_tokens == {"r1": 1, "r2": 10}


def test_preemption_by_recompute_when_pages_run_out():
    s = make(budget=1024, blocks=5)  # 4 usable pages = 512 tokens
    s.add_request(req("old", 250))
    s.add_request(req("new", 250, base=500))
    step(s)  # both fit: 2 pages each
    for _ in range(6):  # decode to 256 tokens each: still 2 pages each
        step(s)
    assert s.requests["old"].num_tokens == 257 and s.kv.block_pool.num_free_blocks == 0
    out = step(s)  # old needs a third page: the newest request is preempted for it
    assert out.preempted_req_ids == ("new",)
    assert out.num_scheduled_tokens == {"old": 1}
    new = s.requests["new"]
    assert new.status == RequestStatus.PREEMPTED and new.num_computed_tokens == 0
    assert new.output_token_ids == [7] * 7 and new.num_preemptions == 1
    s.finish_request("old", RequestStatus.FINISHED_STOPPED)
    out = step(s)
    # Re-admitted with its prompt and outputs; the full blocks it had cached are a hit.
    assert out.new_req_ids == ("new",)
    assert new.num_cached_tokens == 0  # counted at the first admission, not again
    # old's third page was new's second (the least recently freed), so only one page hits.
    assert new.num_computed_tokens == 128 + 129
    assert out.num_scheduled_tokens == {"new": 129}
    assert s.kv.get_block_ids("new") == (3, 4, 2)
    assert new.output_token_ids == [7] * 8


def test_the_only_running_request_preempts_itself_when_it_cannot_grow():
    s = make(budget=1024, blocks=3)  # 2 usable pages; the engine caps max_model_len at 256
    s.add_request(req("a", 200))
    s.add_request(req("b", 50, base=300))
    out = step(s)
    assert out.num_scheduled_tokens == {"a": 200}  # b would need a third page: it waits
    for _ in range(56):
        step(s)
    assert s.requests["a"].num_tokens == 257
    out = step(s)
    assert out.preempted_req_ids == ("a",) and out.is_empty
    assert [r.request_id for r in s.waiting] == ["a", "b"]
    assert s.kv.block_pool.num_free_blocks == 2


def test_abort_of_waiting_and_running_requests():
    s = make(seqs=1)
    s.add_request(req("run", 10))
    s.add_request(req("wait", 10, base=100))
    step(s)
    assert s.finish_request("wait", RequestStatus.FINISHED_ABORTED).status.finished
    assert s.finish_request("run", RequestStatus.FINISHED_ABORTED) is not None
    assert s.finish_request("run", RequestStatus.FINISHED_ABORTED) is None
    assert not s.has_unfinished_requests() and s.kv.block_pool.num_free_blocks == 63
    assert s.schedule().is_empty


def test_chunked_prefill_off_waits_for_a_budget_that_fits():
    s = Scheduler(
        SchedulerConfig(max_num_batched_tokens=100, enable_chunked_prefill=False),
        KVCacheManager(16),
    )
    s.add_request(req("small", 50))
    s.add_request(req("big", 80, base=100))
    out = step(s)
    assert out.num_scheduled_tokens == {"small": 50}
    out = step(s)
    assert out.num_scheduled_tokens == {"small": 1, "big": 80}
