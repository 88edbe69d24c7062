"""On CUDA the model dispatches attention and MSA to the Triton kernels; its logits must match
the CPU (plain torch) path. Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.loaders.checkpoint import load_model
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return init_tiny(
        tmp_path_factory.mktemp("gpu"),
        TinySpec(
            layers=3,
            hidden=256,
            heads=8,
            kv_heads=2,
            experts=4,
            dense_layers=1,
            topk_blocks=2,
            seed=4,
        ),
    )


def _run(model, ids, paged, device, splits):
    from m3agent.engine.native.core.model_api import LayerCache

    gen = torch.Generator().manual_seed(0)
    tables = paged.page_tables([len(ids)], -(-len(ids) // 128) + 2, gen)
    caches = [
        LayerCache(kv=c.kv.to(device), index=None if c.index is None else c.index.to(device))
        for c in paged.make_caches(model, -(-len(ids) // 128) + 2, dtype=model.info.dtype)
    ]
    out, c0 = [], 0
    for n in splits:
        md = paged.build_md([(c0, n)], tables, device=device)
        h = model.forward(torch.tensor(ids[c0 : c0 + n], device=device), caches, md)
        out.append(model.compute_logits(h).cpu())
        c0 += n
    return torch.cat(out)


def test_cuda_float32_matches_cpu(ckpt, paged):
    # float32 on CUDA takes the torch ops (the Triton kernels are built for bf16/fp8 tiles)
    ids = torch.randint(0, 512, (700,), generator=torch.Generator().manual_seed(1)).tolist()
    splits = [300, 256, 140] + [1] * 4
    cpu = _run(load_model(ckpt), ids, paged, "cpu", splits)
    gpu = _run(load_model(ckpt, device="cuda"), ids, paged, "cuda", splits)
    assert ((gpu - cpu).abs().max() / cpu.abs().max()).item() < 2e-3
    assert (gpu.argmax(-1) == cpu.argmax(-1)).float().mean() > 0.98


def test_bf16_kernels_no_worse_than_bf16_torch_ops(ckpt, paged, monkeypatch):
    """The Triton path against the float32 CPU reference may carry bf16 rounding, but no more
    than the torch ops run in bf16 on the same GPU (measured: 0.33 vs 0.37 max-relative on
    this random model's prefill logits, 0.005 on decode; bench/results/gpu_model_parity_*)."""
    ids = torch.randint(0, 512, (700,), generator=torch.Generator().manual_seed(1)).tolist()
    splits = [300, 256, 140] + [1] * 4
    cpu = _run(load_model(ckpt), ids, paged, "cpu", splits)
    kernels = _run(
        load_model(ckpt, device="cuda", dtype=torch.bfloat16), ids, paged, "cuda", splits
    )
    monkeypatch.setenv("M3AGENT_TORCH_OPS", "all")  # read when a model is built
    reference = _run(
        load_model(ckpt, device="cuda", dtype=torch.bfloat16), ids, paged, "cuda", splits
    )

    def rel(x):
        return ((x - cpu).abs().max() / cpu.abs().max()).item()

    assert torch.isfinite(kernels).all()
    assert rel(kernels) <= 1.25 * rel(reference) + 0.02, (rel(kernels), rel(reference))
    agree = (kernels.argmax(-1) == cpu.argmax(-1)).float().mean().item()
    ref_agree = (reference.argmax(-1) == cpu.argmax(-1)).float().mean().item()
    assert agree >= ref_agree - 0.02, (agree, ref_agree)
