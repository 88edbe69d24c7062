"""The offload path's parts on real tensors: the CPU's share of a routing once hot slots are
served elsewhere, the hot cache's choice from counts, the prefill streamer against the CPU
reference, the load-time collector, and the offload choice."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny
from m3agent.engine.offload.choose import choose_offload
from m3agent.engine.offload.config import OffloadConfig
from m3agent.engine.offload.cpu_experts import CpuExperts, HostExpertLayer
from m3agent.engine.offload.hot_cache import HotExperts
from m3agent.engine.offload.offloaded_moe import cpu_slots
from m3agent.engine.offload.placement import HostExpertCollector
from m3agent.engine.offload.plan import ExpertForm
from m3agent.engine.offload.prefill_stream import PrefillStreamer

from .offload_helpers import random_expert_weights

H, INTER, E = 64, 32, 6


def layer(form: ExpertForm, seed: int = 0) -> HostExpertLayer:
    return HostExpertLayer.from_weights(*random_expert_weights(E, H, INTER, seed, 0.1), form)


def routing(t: int, k: int = 3, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(t)])
    w = torch.rand(t, k, generator=g)
    x = (torch.randn(t, H, generator=g) * 2).to(torch.bfloat16)
    return x, ids, w


@pytest.mark.parametrize("t", [1, 5])
def test_cpu_share_plus_hot_share_is_the_whole_routed_sum(t):
    L = layer(ExpertForm.INT8)
    cpu = CpuExperts({0: L}, use_kernel=False)  # the split is checked, not the kernel
    x, ids, w = routing(t)
    hot_ids = {int(ids[0, 0]), int(ids[-1, 1])}
    hot = torch.tensor([[int(e) in hot_ids for e in row] for row in ids])
    sel = cpu_slots(ids, w, hot)
    cold_part = cpu.forward(0, x, *sel)
    hot_part = cpu.reference(0, x, ids, torch.where(hot, w, torch.zeros_like(w)))
    whole = cpu.reference(0, x, ids, w)
    assert ((cold_part + hot_part - whole).norm() / whole.norm()) < 1e-2
    # every slot hot: nothing left for the CPU
    assert cpu_slots(ids, w, torch.ones_like(hot)) is None


def test_hot_cache_takes_the_most_routed_experts_and_computes_like_the_cpu():
    L = layer(ExpertForm.INT8, 2)
    hot = HotExperts({4: L}, per_layer=2, device=torch.device("cpu"))
    counts = torch.tensor([5, 0, 9, 9, 1, 0])
    assert hot.refresh({4: counts}) == 2
    assert sorted(hot.resident[4]) == [2, 3]  # ties by count go to the lower id
    assert hot.refresh({4: counts}) == 0  # same counts: nothing moves
    assert hot.refresh({4: torch.tensor([9, 0, 0, 10, 0, 0])}) == 1  # 2 leaves, 0 enters
    assert sorted(hot.resident[4]) == [0, 3]
    x, _, w = routing(3, 2)
    ids = torch.tensor([[0, 3], [3, 1], [5, 0]])
    got = hot.forward(4, x, ids, w, 1.702, 7.0, 1.0)
    is_hot = torch.isin(ids, torch.tensor([0, 3]))
    want = CpuExperts({4: L}).reference(4, x, ids, torch.where(is_hot, w, torch.zeros_like(w)))
    assert (got - want).norm() / want.norm() < 1e-2
    assert hot.stats().hits == 4 and hot.stats().lookups == 6


@pytest.mark.parametrize("form", [ExpertForm.BF16, ExpertForm.INT8], ids=str)
@pytest.mark.parametrize("group", [1, 4, 6])
def test_streamed_prefill_equals_the_cpu_experts(form, group):
    layers = {1: layer(form, 3), 3: layer(form, 4)}
    st = PrefillStreamer(layers, torch.device("cpu"), group)
    cpu = CpuExperts(layers)
    for li in (1, 3, 1):  # the last layer's prefetch wraps to the first
        x, ids, w = routing(40, 3, seed=li)
        got = st.forward(li, x, ids, w, 1.702, 7.0, 1.0)
        want = cpu.reference(li, x, ids, w)
        assert (got - want).norm() / want.norm() < 1e-2
    one = sum(v.numel() * v.element_size() for v in (layers[1].w13, layers[1].w2)) + sum(
        v.numel() * v.element_size() for v in (layers[1].s13, layers[1].s2) if v is not None
    )
    assert st.bytes_streamed >= 3 * one  # every expert moved once per layer pass


def test_collector_builds_the_host_form_and_names_what_is_missing():
    c = HostExpertCollector(2, ExpertForm.INT8)
    g = torch.Generator().manual_seed(0)
    ws = {}
    for e in range(2):
        for n, shape in (("w1", (INTER, H)), ("w3", (INTER, H)), ("w2", (H, INTER))):
            ws[(e, n)] = torch.randn(*shape, generator=g)
            c.add(f"model.layers.7.block_sparse_moe.experts.{e}.{n}.weight", ws[(e, n)])
    (L,) = c.layers().values()
    whole = HostExpertLayer.from_weights(
        [ws[(e, "w1")] for e in range(2)],
        [ws[(e, "w3")] for e in range(2)],
        [ws[(e, "w2")] for e in range(2)],
        ExpertForm.INT8,
    )
    assert torch.equal(L.w13, whole.w13) and torch.equal(L.s2, whole.s2)
    assert len(c.seen_names()) == 6
    c.add("model.layers.9.block_sparse_moe.experts.0.w1.weight", ws[(0, "w1")])
    c.add("model.layers.9.block_sparse_moe.experts.0.w3.weight", ws[(0, "w3")])
    c.add("model.layers.9.block_sparse_moe.experts.0.w2.weight", ws[(0, "w2")])
    with pytest.raises(ValueError, match="layer 9: 1 of 2 routed experts"):
        c.layers()


def test_offload_config_and_choice(tmp_path):
    with pytest.raises(ValueError, match="not a host form"):
        OffloadConfig(form=ExpertForm.STORED)
    init_tiny(tmp_path, TinySpec(layers=2, hidden=128, experts=2))
    # a CPU run holds everything in host memory already: auto never offloads there
    assert choose_offload(tmp_path, "cpu", "auto").config is None
    forced = choose_offload(tmp_path, "cpu", "on", "bf16")
    assert forced.config.form is ExpertForm.BF16 and forced.config.hot_experts_per_layer == 0
    assert choose_offload(tmp_path, "cpu", "on").config.form is ExpertForm.INT8
    assert choose_offload(tmp_path, "cpu", "off").config is None
    with pytest.raises(ValueError, match="unknown expert form 'int3'"):
        choose_offload(tmp_path, "cpu", "on", "int3")
    with pytest.raises(ValueError, match="offload mode"):
        choose_offload(tmp_path, "cpu", "sometimes")
