"""Prefill progress from the native engine (issue 22): a long prompt prefilled in several
chunks reports each chunk through the Engine API (engine.api.PrefillProgress), before any
text; a second prompt sharing its prefix reports the cached tokens. Real tiny M3 on the CPU."""

from __future__ import annotations

import asyncio

import pytest
from m3agent.engine.api import (
    ChatRequest,
    ContentDelta,
    Message,
    PrefillProgress,
    ReasoningDelta,
    SamplingParams,
    UsageDelta,
)
from m3agent.engine.backends.native import NativeEngine
from m3agent.engine.native.core.engine_config import EngineConfig

from ...support.native import tiny_m3

CHUNK = 256


@pytest.fixture(scope="module")
def tiny_m3_dir(tmp_path_factory):
    return tiny_m3(tmp_path_factory.mktemp("tiny_m3"), seed=3)


def _chat(rid: str, text: str) -> ChatRequest:
    return ChatRequest(
        rid,
        (Message("system", "You are terse."), Message("user", text)),
        thinking_mode="disabled",
        sampling=SamplingParams(max_tokens=4, temperature=0.0),
    )


def test_each_chunk_is_reported_before_the_text(tiny_m3_dir):
    async def main():
        engine = NativeEngine.from_model_dir(
            tiny_m3_dir,
            config=EngineConfig(num_gpu_blocks=64, max_num_batched_tokens=CHUNK),
        )
        try:
            long_text = "Please read this repository summary carefully. " * 60
            first = [d async for d in engine.stream(_chat("p1", long_text))]
            # Same prefix, new question: the shared whole pages come from the cache.
            second = [d async for d in engine.stream(_chat("p2", long_text + " Why?"))]
            return first, second
        finally:
            await engine.close()

    first, second = asyncio.run(main())
    usage = first[-1]
    assert isinstance(usage, UsageDelta)
    total = usage.usage.prompt_tokens
    progress = [d for d in first if isinstance(d, PrefillProgress)]
    assert total > 3 * CHUNK
    assert len(progress) == -(-total // CHUNK)  # one per chunk, the last one included
    done = [p.computed_tokens for p in progress]
    assert done == sorted(done) and done[-1] == total and done[0] == CHUNK
    assert all(p.prompt_tokens == total and p.cached_tokens == 0 for p in progress)
    assert all(p.elapsed_s >= 0 for p in progress)
    assert progress[-1].tokens_per_s and progress[-1].tokens_per_s > 0
    assert progress[-1].eta_s == 0
    # Every progress delta comes before the first text.
    text_at = next(i for i, d in enumerate(first) if isinstance(d, (ContentDelta, ReasoningDelta)))
    assert max(i for i, d in enumerate(first) if isinstance(d, PrefillProgress)) < text_at

    cached = [d for d in second if isinstance(d, PrefillProgress)]
    hit = second[-1].usage.cached_prompt_tokens
    assert hit > 0 and all(p.cached_tokens == hit for p in cached)
    assert cached[0].computed_tokens > hit  # the first chunk starts after the cached pages
