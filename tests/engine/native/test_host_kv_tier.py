"""The host-memory tier of MSA's K/V pages on the CPU (the CPU standing in for the GPU): the
pool and the device block cache are separate tensors, a device cache smaller than a prompt's
blocks forces evictions and re-fetches, and greedy tokens and logits match the engine
without the tier."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.core.attention_metadata import BLOCK_SIZE
from m3agent.engine.native.core.cache_setup import WeightsId, host_tier_choice
from m3agent.engine.native.core.engine_config import EngineConfig
from m3agent.engine.native.core.llm_engine import LLMEngine
from m3agent.engine.native.core.model_api import LayerCacheSpec
from m3agent.engine.native.core.sampling_params import native_params
from m3agent.engine.native.layers.attention import insert_kv
from m3agent.engine.native.runner.host_kv_tier import (
    HostKVTier,
    device_cache_bytes,
    device_resident_specs,
)
from m3agent.engine.native.runner.kv_cache_allocator import bytes_per_block

GREEDY = native_params(max_tokens=3, ignore_eos=True)


@pytest.fixture(scope="module")
def m3(tmp_path_factory):
    from m3agent.engine.native.loaders.checkpoint import load_model
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    path = tmp_path_factory.mktemp("tiny_m3_host_tier")
    spec = TinySpec(
        layers=2, hidden=128, heads=2, kv_heads=1, experts=2, seed=5, dense_layers=1,
        topk_blocks=2,
    )  # fmt: skip
    return load_model(init_tiny(path, spec))


def prompt(n: int, seed: int) -> list[int]:
    return torch.randint(3, 250, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def config(**kw) -> EngineConfig:
    return EngineConfig(num_gpu_blocks=16, keep_logits=True, max_num_batched_tokens=256, **kw)


def test_tier_matches_all_on_device_with_evictions(m3):
    # 520 and 400 tokens: 5 and 4 blocks; one query selects 2 blocks (top-k 2, one KV head),
    # the device cache holds 3 per MSA layer: blocks are evicted and fetched again
    prompts = [prompt(520, 1), prompt(400, 2)]
    base = LLMEngine(m3, None, config())
    base_outs = base.generate(prompts, GREEDY)
    want = [o.token_ids for o in base_outs]
    engine = LLMEngine(m3, None, config(kv_host_tier=True, kv_device_blocks=3))
    outs = engine.generate(prompts, GREEDY)
    assert [o.token_ids for o in outs] == want
    for o, w in zip(outs, base_outs, strict=True):
        # rows attended in other groupings: the same maths, other float summation orders
        torch.testing.assert_close(
            torch.stack(engine.kept_logits[o.request_id]),
            torch.stack(base.kept_logits[w.request_id]),
            rtol=0,
            atol=1e-4,
        )
    tier = engine.host_kv
    assert tier is not None and len(tier.layers) == 1  # one MSA layer; the dense one on device
    (layer,) = tier.layers
    assert layer.blocks.shape[0] == 3 and layer.pool.shape[0] == engine.num_blocks
    assert engine.runner.caches[0].host is None  # the dense layer keeps its KV on the device
    s = tier.stats
    # more fetches than blocks ever used (9): evicted blocks came back; decode steps hit
    assert s.blocks_fetched > 9 and s.cache_hits > 0
    assert s.bytes_fetched == s.blocks_fetched * layer.pool[0].nbytes
    assert s.attend_calls > engine.num_steps  # prefill rows were split to fit 3 blocks
    # the same prompt again: its prefix pages come from the cache, still through the tier
    fetched = s.blocks_fetched
    again = engine.generate([prompts[0]], GREEDY)[0]
    assert again.num_cached_tokens > 0 and again.token_ids == want[0]
    assert s.blocks_fetched > fetched


def test_the_host_budget_bounds_the_blocks(m3):
    spec = m3.cache_specs()[1]  # the MSA layer's K/V: what its host pool holds per block
    elem = torch.empty((), dtype=m3.info.dtype).element_size()
    block = BLOCK_SIZE * spec.num_kv_heads * 2 * spec.head_dim * elem
    cfg = EngineConfig(kv_host_tier=True, kv_host_memory_bytes=10 * block)
    assert LLMEngine(m3, None, cfg).num_blocks == 10
    # the device budget pays for the block caches first, then for index keys and dense K/V
    specs = m3.cache_specs()
    device = bytes_per_block(device_resident_specs(specs), m3.info.dtype)
    reserved = device_cache_bytes(specs, m3.info.dtype, 3)
    assert reserved == 3 * block
    cfg = EngineConfig(
        kv_host_tier=True, kv_device_blocks=3, kv_cache_memory_bytes=reserved + 20 * device
    )
    assert LLMEngine(m3, None, cfg).num_blocks == 20


def test_one_query_larger_than_the_device_cache_fails_the_request(m3):
    engine = LLMEngine(m3, None, config(kv_host_tier=True, kv_device_blocks=1))
    out = engine.generate([prompt(300, 4)], GREEDY)[0]
    assert out.error is not None and "raise kv_device_blocks" in out.error


def tier(num_blocks=6, cache_blocks=2, dtype=torch.float32):
    return HostKVTier(
        [LayerCacheSpec(1, 4, 8)], num_blocks, cache_blocks, dtype, torch.device("cpu")
    )


def test_lru_eviction_and_write_through():
    t = tier()
    (layer,) = t.layers
    layer.pool.copy_(torch.randn_like(layer.pool))
    assert layer.ensure_resident(torch.tensor([3, 5])).tolist() == [0, 1]
    assert torch.equal(layer.blocks, layer.pool[[3, 5]])
    layer.ensure_resident(torch.tensor([3]))  # 3 is now the most recently used
    assert layer.ensure_resident(torch.tensor([4])).tolist() == [1]  # 5 evicted, not 3
    assert layer.resident() == [3, 4]
    assert (t.stats.blocks_fetched, t.stats.cache_hits) == (3, 1)
    # a write to a resident block lands in its device copy too; to another only on the host
    k, v = torch.randn(2, 1, 4), torch.randn(2, 1, 4)
    slots = torch.tensor([4 * BLOCK_SIZE + 7, 1 * BLOCK_SIZE])
    layer.insert(k, v, slots, insert_kv)
    assert torch.equal(layer.blocks[1], layer.pool[4])
    assert torch.equal(layer.pool[1, :, 0, :4], k[1])
    t.invalidate([4])
    assert layer.resident() == [3]
    layer.ensure_resident(torch.tensor([4]))
    assert t.stats.blocks_fetched == 4


def test_fp8_pages_are_fetched_byte_for_byte():
    t = tier(dtype=torch.float8_e4m3fn)
    (layer,) = t.layers
    k, v = torch.randn(3, 1, 4), torch.randn(3, 1, 4)
    layer.insert(
        k, v, torch.tensor([2 * BLOCK_SIZE, 2 * BLOCK_SIZE + 1, 5 * BLOCK_SIZE]), insert_kv
    )
    layer.ensure_resident(torch.tensor([5, 2]))
    assert torch.equal(layer.blocks.view(torch.uint8), layer.pool[[5, 2]].view(torch.uint8))
    assert layer.pool[2].float().abs().sum() > 0


def disk_config(root, **kw) -> EngineConfig:
    # 3 usable blocks: a second 300-token prompt (3 blocks) reuses the first one's block ids
    return EngineConfig(
        num_gpu_blocks=4, keep_logits=True, max_num_batched_tokens=256, kv_disk_dir=str(root), **kw
    )


def tokens_and_logits(engine: LLMEngine, tokens: list[int]):
    (out,) = engine.generate([tokens], GREEDY)
    logits = torch.stack(engine.kept_logits.pop(out.request_id))
    engine.close()  # writes the queued pages
    return out, logits


def restore_after_another_prompt(m3, root, weights, drop_stale: bool):
    engine = LLMEngine(
        m3, None, disk_config(root, kv_host_tier=True, kv_device_blocks=3), weights=weights
    )
    tokens_and_logits(engine, prompt(300, 7))  # another prompt's 3 blocks on the device
    resident = set(engine.host_kv.layers[0].resident())
    tiers, restored = engine.page_tiers, []
    invalidate = tiers.on_restored if drop_stale else (lambda ids: None)
    tiers.on_restored = lambda ids: (restored.extend(ids), invalidate(ids))
    out, logits = tokens_and_logits(engine, prompt(300, 1))
    assert out.num_restored_tokens == 2 * BLOCK_SIZE
    assert set(restored) <= resident  # restored into block ids with copies on the device
    return out, logits


def test_disk_pages_come_back_into_the_host_pool(m3, tmp_path):
    """Pages written without the tier are restored into the host pool: the restored blocks'
    ids held another prompt's blocks on the device, whose stale copies are dropped (the
    control: kept, they are attended and the logits change)."""
    weights = WeightsId("tiny-m3", "tiny")
    want, want_logits = tokens_and_logits(
        LLMEngine(m3, None, disk_config(tmp_path), weights=weights), prompt(300, 1)
    )
    out, logits = restore_after_another_prompt(m3, tmp_path, weights, drop_stale=True)
    assert out.token_ids == want.token_ids
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=1e-4)
    _, stale = restore_after_another_prompt(m3, tmp_path, weights, drop_stale=False)
    assert not torch.allclose(stale, want_logits, rtol=0, atol=1e-2)


def test_pages_written_from_the_host_pool_serve_an_engine_without_it(m3, tmp_path):
    weights = WeightsId("tiny-m3", "tiny")
    tier_on = disk_config(tmp_path, kv_host_tier=True, kv_device_blocks=3)
    want, want_logits = tokens_and_logits(
        LLMEngine(m3, None, tier_on, weights=weights), prompt(300, 2)
    )
    out, logits = tokens_and_logits(
        LLMEngine(m3, None, disk_config(tmp_path), weights=weights), prompt(300, 2)
    )
    assert out.num_restored_tokens == 2 * BLOCK_SIZE and out.token_ids == want.token_ids
    torch.testing.assert_close(logits, want_logits, rtol=0, atol=1e-4)


def test_auto_turns_the_tier_on_only_when_a_context_does_not_fit_the_gpu():
    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    assert host_tier_choice(None, gpu, True, 8193, 8193) == (
        False,
        "KV host tier off: the GPU holds the whole KV cache (8193 blocks of 128 tokens, 8193 "
        "for one context)",
    )
    on, why = host_tier_choice(None, gpu, True, 1000, 8193)
    assert on and why.startswith("KV host tier on: the GPU holds 1000 of the 8193 blocks")
    assert host_tier_choice(None, cpu, True, 10, 8193)[0] is False  # the CPU: host memory
    assert host_tier_choice(True, cpu, True, 10, 10) == (True, "KV host tier on (forced)")
    assert host_tier_choice(True, gpu, False, 10, 8193)[0] is False  # no MSA layer to page
