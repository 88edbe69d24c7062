"""Issue 20 point 5 on the tiny M3: the offloaded engine (routed experts in host memory, CPU
compute, hot-expert cache, prefill streaming; the "GPU" is the CPU device here) gives the same
greedy tokens over 64 steps as the all-on-device engine whose routed experts are the host
form's values at the host kernel's precision, for every form; and a second request sharing a
prefix hits the prefix cache on it like on any engine."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny
from m3agent.engine.offload.config import OffloadConfig
from m3agent.engine.offload.plan import ExpertForm

from .offload_helpers import (
    engine,
    greedy,
    host_precision_reference,
    offloaded,
    prompt,
    reference_for,
)

FORMS = [ExpertForm.BF16, ExpertForm.INT8, ExpertForm.INT4, ExpertForm.MXFP8]
# (hot experts per layer, prefill stream threshold): the CPU alone; and the hot cache with
# the 200-token prompt streamed in groups of 3 experts (8 experts: 3 groups, double-buffered)
MODES = {"cpu": (0, 0), "hot+stream": (3, 64)}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_offload")
    init_tiny(path, TinySpec(layers=3, experts=8, seed=3))
    return path


def _logits(eng, out) -> torch.Tensor:
    return torch.stack(eng.kept_logits[out.request_id])


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("form", FORMS, ids=str)
def test_offloaded_greedy_tokens_equal_the_on_device_engine(tiny, form, mode):
    hot, stream_at = MODES[mode]
    cfg = OffloadConfig(
        form=form,
        hot_experts_per_layer=hot,
        prefill_stream_tokens=stream_at,
        stream_experts=3,
        cpu_kernel=False,  # the torch path: the rounding the reference shares exactly
    )
    off = offloaded(tiny, cfg)
    assert set(off.offload.layers) == {1, 2}  # layer 0 is the dense layer
    assert all(L.form is form for L in off.offload.layers.values())
    ref = host_precision_reference(tiny, off)
    prompts = [prompt(200, 1), prompt(50, 2)]
    e_off, e_ref = engine(off), engine(ref)
    got = e_off.generate(prompts, greedy(64))
    want = e_ref.generate(prompts, greedy(64))
    for g, w in zip(got, want, strict=True):
        assert len(g.token_ids) == 64
        assert g.token_ids == w.token_ids
        assert (_logits(e_off, g) - _logits(e_ref, w)).abs().max() < 0.05
    st = off.offload.stats()
    assert st.cpu_tokens > 0  # decode steps ran their routed experts on the CPU
    if stream_at:
        # the first step prefills both prompts (250 tokens): both layers streamed their experts
        assert st.streamed_tokens == 2 * 250
        assert st.bytes_streamed >= off.offload.host_bytes
    if hot:
        # a second batch after the refresh between requests: some routed slots hit
        e_off.generate([prompt(30, 3)], greedy(16))
        assert st.hot is not None and off.offload.stats().hot.hits > 0
        assert off.offload.stats().hot.refreshes >= 2


@pytest.mark.parametrize("form", FORMS, ids=str)
def test_offloaded_prefill_logits_near_the_plain_fp32_engine(tiny, form):
    """Against the plain all-on-device fp32 engine with the dequantised host weights, before
    any token can differ: the first logits agree to the host kernel's bf16 rounding."""
    off = offloaded(tiny, OffloadConfig(form=form, prefill_stream_tokens=0, cpu_kernel=False))
    ref = reference_for(tiny, off)
    p = [prompt(120, 4)]
    e_off, e_ref = engine(off), engine(ref)
    a, b = e_off.generate(p, greedy(1))[0], e_ref.generate(p, greedy(1))[0]
    la, lb = _logits(e_off, a)[0], _logits(e_ref, b)[0]
    assert (la - lb).abs().max() < 0.1 * lb.abs().max()
    assert a.token_ids == b.token_ids


def test_a_shared_prefix_hits_the_prefix_cache_on_the_offloaded_engine(tiny):
    off = offloaded(tiny, OffloadConfig(form=ExpertForm.INT8, hot_experts_per_layer=2))
    eng = engine(off)
    first = prompt(300, 5)
    out1 = eng.generate([first], greedy(8))[0]
    assert out1.num_cached_tokens == 0
    second = first + list(out1.token_ids) + prompt(40, 6)
    out2 = eng.generate([second], greedy(8))[0]
    assert out2.num_cached_tokens == 256  # both whole pages of the first request
    # and the hit changes nothing: a fresh offloaded engine computes the same tokens cold
    cold = engine(offloaded(tiny, OffloadConfig(form=ExpertForm.INT8, hot_experts_per_layer=2)))
    assert cold.generate([second], greedy(8))[0].token_ids == out2.token_ids
