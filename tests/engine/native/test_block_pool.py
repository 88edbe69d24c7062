"""Block pool and KV cache manager, in the style of vLLM's prefix-caching tests."""

from __future__ import annotations

import pytest
from m3agent.engine.native.core.block_hash import hash_block_tokens
from m3agent.engine.native.core.block_pool import BlockPool
from m3agent.engine.native.core.kv_cache_manager import KVCacheManager
from m3agent.engine.native.core.request import Request
from m3agent.engine.native.core.sampling_params import native_params

BS = 128


def make_request(rid: str, tokens: list[int]) -> Request:
    return Request(rid, list(tokens), native_params(max_tokens=16))


def run_prefill(manager: KVCacheManager, req: Request) -> list[int]:
    """Schedules the whole prompt at once, as the scheduler would, and marks it computed."""
    hits, n_hit = manager.get_computed_blocks(req)
    new = manager.allocate_slots(req, req.num_tokens - n_hit, hits)
    assert new is not None
    req.num_computed_tokens = req.num_tokens
    manager.cache_blocks(req)
    return [b.block_id for b in new]


def test_block_zero_is_reserved_and_ids_are_handed_out_in_order():
    pool = BlockPool(5)
    assert pool.num_free_blocks == 4
    assert [b.block_id for b in pool.get_new_blocks(3)] == [1, 2, 3]
    assert pool.free_block_ids() == [4]
    with pytest.raises(ValueError):
        pool.get_new_blocks(2)
    with pytest.raises(ValueError):
        BlockPool(1)


def test_prefill_hit_exact_block_ids_and_ref_counts():
    manager = KVCacheManager(num_blocks=11)
    common = list(range(3 * BS))
    a = make_request("a", common + [7] * 10)  # 3 full blocks + 10 tokens
    assert run_prefill(manager, a) == [1, 2, 3, 4]
    assert a.block_hashes[0] == hash_block_tokens(None, common[:BS])
    assert a.block_hashes[1] == hash_block_tokens(a.block_hashes[0], common[BS : 2 * BS])

    b = make_request("b", common + [9] * 5)
    hits, n_hit = manager.get_computed_blocks(b)
    assert [blk.block_id for blk in hits] == [1, 2, 3] and n_hit == 3 * BS
    new = manager.allocate_slots(b, b.num_tokens - n_hit, hits)
    assert [blk.block_id for blk in new] == [5]
    assert [blk.ref_cnt for blk in manager.block_pool.blocks[1:6]] == [2, 2, 2, 1, 1]

    manager.free(a)
    assert [blk.ref_cnt for blk in manager.block_pool.blocks[1:6]] == [1, 1, 1, 0, 1]
    # Only a's private tail block is free among the used ones; never-used blocks come first.
    assert manager.block_pool.free_block_ids() == [6, 7, 8, 9, 10, 4]


def test_last_prompt_token_is_always_recomputed():
    manager = KVCacheManager(num_blocks=8)
    tokens = list(range(2 * BS))  # exactly two full blocks
    run_prefill(manager, make_request("a", tokens))
    hits, n_hit = manager.get_computed_blocks(make_request("b", tokens))
    # The second block holds the last token, so only the first block can be a hit.
    assert [blk.block_id for blk in hits] == [1] and n_hit == BS


def test_lazy_eviction_keeps_hashes_until_reuse_and_evicts_least_recently_freed():
    manager = KVCacheManager(num_blocks=5)  # 4 usable blocks
    a = make_request("a", list(range(BS)) + [1])
    b = make_request("b", list(range(1000, 1000 + BS)) + [1])
    assert run_prefill(manager, a) == [1, 2]
    assert run_prefill(manager, b) == [3, 4]
    manager.free(a)  # freed tail first: queue 2, 1
    manager.free(b)  # queue 2, 1, 4, 3
    assert manager.block_pool.free_block_ids() == [2, 1, 4, 3]
    # Both prefixes are still findable after being freed (lazy eviction).
    assert manager.get_computed_blocks(make_request("a2", list(range(BS)) + [5]))[1] == BS
    # A new request needing 2 blocks takes 2 then 1: a's cached block 1 is evicted, b's is not.
    c = make_request("c", [3] * (BS + 1))
    assert run_prefill(manager, c) == [2, 1]
    assert manager.block_pool.num_evictions == 1
    assert manager.get_computed_blocks(make_request("a3", list(range(BS)) + [5]))[1] == 0
    hits, n = manager.get_computed_blocks(make_request("b2", list(range(1000, 1000 + BS)) + [5]))
    assert [blk.block_id for blk in hits] == [3] and n == BS


def test_hit_on_a_free_cached_block_counts_against_free_space():
    manager = KVCacheManager(num_blocks=3)  # 2 usable blocks
    a = make_request("a", list(range(BS)) + [1])
    run_prefill(manager, a)
    manager.free(a)
    b = make_request("b", list(range(BS)) + [2] * (BS + 1))  # needs 3 blocks, 1 of them a hit
    hits, n_hit = manager.get_computed_blocks(b)
    assert n_hit == BS
    assert manager.allocate_slots(b, b.num_tokens - n_hit, hits) is None
    # Refusal changed nothing.
    assert manager.block_pool.free_block_ids() == [2, 1]
    assert manager.block_pool.blocks[1].ref_cnt == 0


def test_forced_hash_collision_is_caught_by_the_token_check():
    def constant_hash(parent, tokens, extra):
        return b"same-hash-for-all"

    manager = KVCacheManager(num_blocks=8, hash_fn=constant_hash)
    a = make_request("a", list(range(BS)) + [1])
    run_prefill(manager, a)
    b = make_request("b", list(range(1, BS + 1)) + [1])  # different tokens, same hash
    hits, n_hit = manager.get_computed_blocks(b)
    assert hits == [] and n_hit == 0
    assert manager.block_pool.num_collisions == 1
    # The genuine prefix still hits.
    assert manager.get_computed_blocks(make_request("c", list(range(BS)) + [9]))[1] == BS


def test_collision_on_a_deeper_block_with_a_different_parent_is_caught():
    def tokens_only_hash(parent, tokens, extra):  # ignores the chain: a deliberately weak hash
        return hash_block_tokens(None, tokens)

    manager = KVCacheManager(num_blocks=8, hash_fn=tokens_only_hash)
    shared_tail = [5] * BS
    run_prefill(manager, make_request("a", [1] * BS + shared_tail + [0]))
    hits, n_hit = manager.get_computed_blocks(make_request("b", [2] * BS + shared_tail + [0]))
    assert n_hit == 0


def test_generated_tokens_fill_blocks_that_become_cached():
    manager = KVCacheManager(num_blocks=8)
    req = make_request("a", list(range(BS - 1)))
    run_prefill(manager, req)
    req.append_output_token(42)  # the sampled token, computed by the next decode step
    req.append_output_token(43)
    assert manager.allocate_slots(req, 1) == []  # position 127 still fits the first block
    req.num_computed_tokens += 1
    manager.cache_blocks(req)
    hits, n_hit = manager.get_computed_blocks(make_request("b", list(range(BS - 1)) + [42, 7]))
    assert [blk.block_id for blk in hits] == [1] and n_hit == BS
    # The next decode needs a second block.
    assert [blk.block_id for blk in manager.allocate_slots(req, 1)] == [2]


def test_free_twice_is_an_error_not_a_corruption():
    pool = BlockPool(4)
    (blk,) = pool.get_new_blocks(1)
    pool.free_blocks([blk])
    with pytest.raises(ValueError):
        pool.free_blocks([blk])


def test_reset_prefix_cache_only_when_idle():
    manager = KVCacheManager(num_blocks=4)
    a = make_request("a", list(range(BS)) + [1])
    run_prefill(manager, a)
    assert manager.reset_prefix_cache() is False
    manager.free(a)
    assert manager.reset_prefix_cache() is True
    assert manager.get_computed_blocks(make_request("b", list(range(BS)) + [1]))[1] == 0
