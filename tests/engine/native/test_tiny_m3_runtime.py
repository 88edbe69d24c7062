"""The runtime over a real (random) M3 with MSA layers: with top-k 4 blocks and 1100-token
prompts the selection is really sparse, and index keys must survive chunking and prefix hits."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.core.engine_config import EngineConfig
from m3agent.engine.native.core.llm_engine import LLMEngine
from m3agent.engine.native.core.sampling_params import native_params

GREEDY = native_params(max_tokens=4, ignore_eos=True)


@pytest.fixture(scope="module")
def m3():
    from m3agent.engine.native.loaders.checkpoint import load_model
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    return load_model(init_tiny_dir(TinySpec, init_tiny))


def init_tiny_dir(spec_cls, write):
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="tiny_m3_rt_"))
    write(
        path,
        spec_cls(
            layers=2,
            hidden=128,
            heads=2,
            kv_heads=1,
            experts=2,
            seed=5,
            dense_layers=1,
            topk_blocks=4,
        ),
    )
    return path


def prompt(n: int, seed: int) -> list[int]:
    return torch.randint(3, 250, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def run(model, prompts, **kw):
    engine = LLMEngine(model, None, EngineConfig(num_gpu_blocks=40, keep_logits=True, **kw))
    outs = engine.generate(prompts, GREEDY)
    return engine, outs, [torch.stack(engine.kept_logits[o.request_id]) for o in outs]


def test_msa_chunked_prefill_equals_one_shot(m3):
    assert any(s.index_dim > 0 for s in m3.cache_specs())
    p = prompt(1100, 1)
    _, cold, cold_logits = run(m3, [p], max_num_batched_tokens=2048)
    for chunk in (128, 256, 1000):
        _, outs, logits = run(m3, [p], max_num_batched_tokens=chunk)
        assert outs[0].token_ids == cold[0].token_ids, chunk
        torch.testing.assert_close(logits[0], cold_logits[0], rtol=1e-4, atol=1e-4)


def test_msa_prefix_hit_equals_cold_with_exact_counts(m3):
    base = prompt(900, 2)
    extended = base + prompt(300, 3)
    engine = LLMEngine(m3, None, EngineConfig(num_gpu_blocks=40, keep_logits=True))
    engine.generate([base], GREEDY)
    (hit,) = engine.generate([extended], GREEDY)
    assert hit.num_cached_tokens == 896  # 7 full pages of the 900-token prompt
    _, cold, cold_logits = run(m3, [extended])
    assert cold[0].num_cached_tokens == 0 and hit.token_ids == cold[0].token_ids
    torch.testing.assert_close(
        torch.stack(engine.kept_logits[hit.request_id]), cold_logits[0], rtol=1e-4, atol=1e-4
    )


def test_fp8_kv_cache_on_cpu_close_to_full_precision(m3):
    """--kv-cache-dtype fp8: K/V and index keys stored as e4m3 (the torch path upcasts on
    read); the same greedy tokens here and logits within e4m3's rounding."""
    p = prompt(700, 1)
    _, full, full_logits = run(m3, [p])
    engine, fp8, fp8_logits = run(m3, [p], kv_cache_dtype="fp8")
    assert all(c.kv.dtype == torch.float8_e4m3fn for c in engine.runner.caches)
    assert any(
        c.index is not None and c.index.dtype == torch.float8_e4m3fn for c in engine.runner.caches
    )
    a, b = full_logits[0], fp8_logits[0]
    assert torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0) > 0.999
    assert ((a - b).abs().max() / a.abs().max()).item() < 0.05
    assert fp8[0].token_ids[:3] == full[0].token_ids[:3]


def test_fp8_kv_cache_holds_twice_the_blocks(m3):
    budget = 8 * 2**20
    full = LLMEngine(m3, None, EngineConfig(kv_cache_memory_bytes=budget))
    fp8 = LLMEngine(m3, None, EngineConfig(kv_cache_memory_bytes=budget, kv_cache_dtype="fp8"))
    # float32 model: 4 bytes -> 1 byte per element (each count is floored)
    assert 4 * full.num_blocks <= fp8.num_blocks < 4 * (full.num_blocks + 1)


def test_kv_cache_dtype_is_validated():
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        EngineConfig(kv_cache_dtype="int4")
