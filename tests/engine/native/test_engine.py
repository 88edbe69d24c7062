"""LLMEngine over the tiny paged model: chunking, prefix hits, errors, stops."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.api import EngineRequestError, PromptTooLong
from m3agent.engine.native.core.engine_config import EngineConfig
from m3agent.engine.native.core.llm_engine import LLMEngine
from m3agent.engine.native.core.sampling_params import native_params

GREEDY8 = native_params(max_tokens=8, ignore_eos=True)


def prompt(n: int, seed: int = 0, vocab: int = 96) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, vocab, (n,), generator=g).tolist()


def run_one(model, tokens, config: EngineConfig, params=GREEDY8):
    engine = LLMEngine(model, None, config)
    (out,) = engine.generate([tokens], params)
    return engine, out, torch.stack(next(iter(engine.kept_logits.values())))


@pytest.mark.parametrize("chunk", [128, 256, 1000])
def test_chunked_prefill_gives_the_one_shot_logits(make_model, chunk):
    model = make_model()
    tokens = prompt(2100)
    big = EngineConfig(max_num_batched_tokens=4096, num_gpu_blocks=40, keep_logits=True)
    _, cold, cold_logits = run_one(model, tokens, big)
    calls_before = model.forward_calls
    small = EngineConfig(max_num_batched_tokens=chunk, num_gpu_blocks=40, keep_logits=True)
    _, chunked, chunked_logits = run_one(model, tokens, small)
    assert model.forward_calls - calls_before == -(-2100 // chunk) + 7  # chunks, then decodes
    assert chunked.token_ids == cold.token_ids
    torch.testing.assert_close(chunked_logits, cold_logits, rtol=1e-5, atol=1e-5)


def test_prefix_hit_gives_cold_logits_and_exact_cached_counts(make_model):
    model = make_model()
    base = prompt(700, seed=1)
    config = EngineConfig(max_num_batched_tokens=512, num_gpu_blocks=40, keep_logits=True)
    engine = LLMEngine(model, None, config)
    (first,) = engine.generate([base], GREEDY8)
    assert first.num_cached_tokens == 0
    extended = base + prompt(300, seed=2)  # 1000 tokens: shares 5 full blocks with base
    tokens_before = model.tokens_computed
    (hit,) = engine.generate([extended], GREEDY8)
    assert hit.num_cached_tokens == 5 * 128
    assert model.tokens_computed - tokens_before == (1000 - 640) + 7
    hit_logits = torch.stack(engine.kept_logits[hit.request_id])

    _, cold, cold_logits = run_one(make_model(), extended, config)
    assert cold.num_cached_tokens == 0
    assert hit.token_ids == cold.token_ids
    torch.testing.assert_close(hit_logits, cold_logits, rtol=1e-5, atol=1e-5)

    # The same prompt again: every full block but the one holding the last token is a hit.
    (again,) = engine.generate([base], GREEDY8)
    assert again.num_cached_tokens == 5 * 128 and again.token_ids == first.token_ids


def test_prefix_hit_includes_generated_blocks(make_model):
    model = make_model()
    engine = LLMEngine(model, None, EngineConfig(num_gpu_blocks=20))
    base = prompt(250, seed=3)
    (first,) = engine.generate([base], native_params(max_tokens=20, ignore_eos=True))
    # The next turn's prompt extends prompt + output, as the agent does (block 2 ends at 256).
    follow = base + list(first.token_ids) + prompt(40, seed=4)
    (second,) = engine.generate([follow], GREEDY8)
    assert second.num_cached_tokens == 256


def test_prompt_too_long_is_a_clear_error_while_another_request_completes(make_model):
    engine = LLMEngine(make_model(max_len=600), None, EngineConfig(num_gpu_blocks=20))
    engine.add_request("ok", prompt(100), GREEDY8)
    engine.step()
    with pytest.raises(
        PromptTooLong, match="prompt is 700 tokens, more than the model's maximum of 599"
    ):
        engine.add_request("long", prompt(700), GREEDY8)
    with pytest.raises(EngineRequestError, match="outside the vocabulary"):
        engine.add_request("bad", [5, 96], GREEDY8)
    outs = []
    while engine.has_unfinished_requests():
        outs += engine.step()
    assert [o.request_id for o in outs if o.finished] == ["ok"]
    assert outs[-1].num_generated_tokens == 8 and outs[-1].finish_reason == "length"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"max_tokens": 0}, "max_tokens must be at least 1, got 0"),
        ({"temperature": -0.5}, "temperature must be >= 0, got -0.5"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\], got 0.0"),
        ({"top_k": -2}, r"top_k must be -1, 0 \(off\) or positive, got -2"),
        ({"stop": ("",)}, "stop strings must not be empty"),
    ],
)
def test_bad_sampling_is_refused_in_one_line_and_queues_nothing(make_model, change, words):
    """One SamplingParams for every backend: it is checked where it runs, not when it is made."""
    engine = LLMEngine(make_model(), None, EngineConfig(num_gpu_blocks=20))
    params = native_params(**change)  # building it is fine
    with pytest.raises(EngineRequestError, match=f"^bad sampling parameters: {words}$"):
        engine.add_request("bad", prompt(20), params)
    assert not engine.has_unfinished_requests()


def test_max_model_len_is_capped_by_the_cache_and_ends_with_length(make_model):
    engine = LLMEngine(make_model(), None, EngineConfig(num_gpu_blocks=3))  # 256 tokens
    assert engine.max_model_len == 256
    (out,) = engine.generate([prompt(250)], native_params(max_tokens=100, ignore_eos=True))
    assert out.finish_reason == "length" and out.num_generated_tokens == 6


def test_eos_and_stop_token_ids_stop(make_model):
    model = make_model()
    engine = LLMEngine(model, None, EngineConfig(num_gpu_blocks=10))
    (free_run,) = engine.generate([prompt(50)], native_params(max_tokens=12, ignore_eos=True))
    stop_at = free_run.token_ids[4]
    first_idx = free_run.token_ids.index(stop_at)
    (stopped,) = engine.generate(
        [prompt(50)], native_params(max_tokens=12, stop_token_ids=(stop_at,))
    )
    assert stopped.token_ids == free_run.token_ids[: first_idx + 1]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == stop_at


def test_stop_strings_cut_the_text_and_stream_consistently(make_model, char_tokenizer):
    model = make_model(vocab=258)
    engine = LLMEngine(model, char_tokenizer, EngineConfig(num_gpu_blocks=10))
    p = char_tokenizer.encode("hello world, this is a prompt")
    (free_run,) = engine.generate([p], native_params(max_tokens=30, ignore_eos=True))
    text = free_run.text
    assert text == char_tokenizer.decode(list(free_run.token_ids))
    stop = text[10:12]
    cut = text.index(stop)
    engine.add_request("s", p, native_params(max_tokens=30, ignore_eos=True, stop=(stop,)))
    streamed, last = "", None
    while engine.has_unfinished_requests():
        for o in engine.step():
            streamed += o.new_text
            last = o
    assert last.finish_reason == "stop" and last.stop_reason == stop
    assert last.text == streamed == text[:cut]


def test_abort_frees_pages_and_leaves_others_running(make_model):
    engine = LLMEngine(make_model(), None, EngineConfig(num_gpu_blocks=12))
    engine.add_request("a", prompt(300, 1), native_params(max_tokens=50, ignore_eos=True))
    engine.add_request("b", prompt(300, 2), native_params(max_tokens=5, ignore_eos=True))
    engine.step()
    free_before = engine.kv_cache_manager.block_pool.num_free_blocks
    out = engine.abort("a")
    assert out.finished and out.finish_reason == "abort"
    assert engine.kv_cache_manager.block_pool.num_free_blocks == free_before + 3
    assert engine.abort("a") is None
    finals = []
    while engine.has_unfinished_requests():
        finals += [o for o in engine.step() if o.finished]
    assert [(o.request_id, o.num_generated_tokens) for o in finals] == [("b", 5)]


def test_model_failure_ends_the_step_requests_with_an_error_and_the_engine_keeps_serving(
    make_model,
):
    model = make_model()
    engine = LLMEngine(model, None, EngineConfig(num_gpu_blocks=10))
    real_forward = model.forward
    model.forward = lambda *a: (_ for _ in ()).throw(RuntimeError("CUDA error: out of memory"))
    engine.add_request("x", prompt(20), GREEDY8)
    (out,) = engine.step()
    assert out.finish_reason == "error" and "RuntimeError: CUDA error: out of memory" in out.error
    model.forward = real_forward
    (ok,) = engine.generate([prompt(20)], GREEDY8)
    assert ok.num_generated_tokens == 8
    assert engine.kv_cache_manager.block_pool.num_free_blocks == 9


def test_seeded_sampling_is_reproducible_and_batch_independent(make_model):
    model = make_model()
    params = native_params(
        max_tokens=16, temperature=1.0, top_p=0.9, top_k=20, seed=7, ignore_eos=True
    )
    engine = LLMEngine(model, None, EngineConfig(num_gpu_blocks=20))
    (alone,) = engine.generate([prompt(30)], params)
    together = engine.generate(
        [prompt(40, 5), prompt(30), prompt(10, 6)],
        [native_params(max_tokens=16, temperature=1.0), params, GREEDY8],
    )
    assert together[1].token_ids == alone.token_ids
    other_seed = engine.generate(
        [prompt(30)], native_params(max_tokens=16, temperature=1.0, seed=8, ignore_eos=True)
    )
    assert other_seed[0].token_ids != alone.token_ids


@pytest.mark.parametrize("prefix_caching", [False, True])
def test_preemption_by_recompute_gives_the_same_tokens(make_model, prefix_caching):
    model = make_model()
    prompts = [prompt(200, s) for s in (11, 12, 13)]
    long = native_params(max_tokens=120, ignore_eos=True)
    roomy = LLMEngine(model, None, EngineConfig(num_gpu_blocks=20))
    want = [o.token_ids for o in roomy.generate(prompts, long)]
    assert roomy.scheduler.num_preemptions == 0
    # 7 usable pages: three requests of 320 tokens (3 pages each) cannot all stay resident.
    tight = LLMEngine(
        model, None, EngineConfig(num_gpu_blocks=8, enable_prefix_caching=prefix_caching)
    )
    got = tight.generate(prompts, long)
    assert tight.scheduler.num_preemptions > 0
    assert [o.token_ids for o in got] == want
    assert tight.kv_cache_manager.block_pool.num_free_blocks == 7
