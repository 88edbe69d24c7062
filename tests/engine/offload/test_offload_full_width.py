"""Issue 20 point 5 at M3's real width: hidden 6144, expert width 3072 (the released shape),
reduced depth (a dense layer and one MoE layer of 4 experts, top 2) and few heads so it fits
this CPU machine (~0.5 GB checkpoint, ~3 GB peak). The offloaded engine gives the same 64
greedy tokens as the on-device engine with the host form's expert values, per form."""

from __future__ import annotations

import pytest
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny
from m3agent.engine.offload.config import OffloadConfig
from m3agent.engine.offload.plan import ExpertForm

from .offload_helpers import engine, greedy, host_precision_reference, offloaded, prompt

pytestmark = pytest.mark.slow

SPEC = TinySpec(
    layers=2,
    hidden=6144,
    intermediate=3072,
    heads=2,
    kv_heads=1,
    experts=4,
    experts_per_tok=2,
    dense_intermediate=256,
    vocab=512,
    seed=11,
)


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    path = tmp_path_factory.mktemp("wide_m3")
    init_tiny(path, SPEC)
    return path


@pytest.mark.parametrize("form", [ExpertForm.INT8, ExpertForm.BF16], ids=str)
def test_full_width_offloaded_greedy_tokens_equal_on_device(wide, form):
    # hot slots for 2 of the 4 experts and a streamed prefill: every offload path at 6144x3072
    off = offloaded(
        wide,
        OffloadConfig(
            form=form,
            hot_experts_per_layer=2,
            prefill_stream_tokens=48,
            stream_experts=2,
            cpu_kernel=False,  # the torch path: the rounding the reference shares exactly
        ),
    )
    (L,) = off.offload.layers.values()
    assert (L.num_experts, L.hidden, L.inter) == (4, 6144, 3072)
    ref = host_precision_reference(wide, off)
    p = [prompt(64, 7)]
    e_off = engine(off)
    e_off.generate([prompt(16, 8)], greedy(4))  # routing counts for the hot cache
    got = e_off.generate(p, greedy(64))[0]
    want = engine(ref).generate(p, greedy(64))[0]
    assert len(got.token_ids) == 64 and got.token_ids == want.token_ids
    st = off.offload.stats()
    assert st.hot.hits > 0 and st.streamed_tokens >= 64 and st.cpu_tokens > 0
