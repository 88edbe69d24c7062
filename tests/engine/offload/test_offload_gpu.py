"""The offload path on a real CUDA GPU (skipped without one): host experts pinned in place,
router/shared/hot experts on the GPU overlapped with the CPU step, streamed prefill with its
copy stream, through the real engine in bf16."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny
from m3agent.engine.offload.config import OffloadConfig
from m3agent.engine.offload.plan import ExpertForm

from .offload_helpers import engine, greedy, offloaded, prompt

pytestmark = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_offload_gpu")
    init_tiny(path, TinySpec(layers=3, experts=8, seed=3))
    return path


@needs_cuda
@pytest.mark.parametrize("form", [ExpertForm.INT8, ExpertForm.BF16], ids=str)
def test_offloaded_engine_on_cuda_matches_its_cpu_twin(tiny, form):
    from m3agent.engine.native.loaders.checkpoint import load_model

    cfg = OffloadConfig(
        form=form, hot_experts_per_layer=3, prefill_stream_tokens=64, stream_experts=3
    )
    gpu = load_model(tiny, device="cuda", dtype=torch.bfloat16, offload=cfg)
    rt = gpu.offload
    assert rt.pinned and all(t.is_pinned() for t in rt.pinned)  # registered in place
    assert all(L.w13.device.type == "cpu" for L in rt.layers.values())
    assert gpu.model.layers[1].block_sparse_moe.gate.weight.is_cuda
    assert not gpu.info.cuda_graphs  # the CPU step needs the host: eager decode
    p = [prompt(200, 1), prompt(40, 2)]
    e_gpu = engine(gpu, device="cuda")
    outs = e_gpu.generate(p, greedy(32))
    assert all(len(o.token_ids) == 32 and not o.error for o in outs)
    e_gpu.generate([prompt(30, 3)], greedy(8))  # after a refresh: hot hits
    st = rt.stats()
    assert st.streamed_tokens > 0 and st.cpu_tokens > 0 and st.hot.hits > 0
    # the same placement on the CPU device, fp32: the first logits agree to bf16 rounding
    cpu = offloaded(tiny, cfg)
    e_cpu = engine(cpu)
    a = e_gpu.generate([p[0]], greedy(1))[0]
    b = e_cpu.generate([p[0]], greedy(1))[0]
    la, lb = e_gpu.kept_logits[a.request_id][0].float(), e_cpu.kept_logits[b.request_id][0]
    assert (la - lb).abs().max() < 0.1 * lb.abs().max()
    rt.close()
    assert not rt.pinned
