"""On CUDA the model dispatches attention and MSA to the Triton kernels; its logits must match
the CPU (plain torch) path. Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.loader import load_model
from m3agent.engine.native.tiny import TinySpec, init_tiny

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return init_tiny(tmp_path_factory.mktemp("gpu"),
                     TinySpec(layers=3, hidden=256, heads=8, kv_heads=2, experts=4,
                              dense_layers=1, topk_blocks=2, seed=4))


def _run(model, ids, paged, device, splits):
    from m3agent.engine.native.model_api import LayerCache

    gen = torch.Generator().manual_seed(0)
    tables = paged.page_tables([len(ids)], -(-len(ids) // 128) + 2, gen)
    caches = [LayerCache(kv=c.kv.to(device), index=None if c.index is None else c.index.to(device))
              for c in paged.make_caches(model, -(-len(ids) // 128) + 2, dtype=model.info.dtype)]
    out, c0 = [], 0
    for n in splits:
        md = paged.build_md([(c0, n)], tables, device=device)
        h = model.forward(torch.tensor(ids[c0:c0 + n], device=device), caches, md)
        out.append(model.compute_logits(h).cpu())
        c0 += n
    return torch.cat(out)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-3), (torch.bfloat16, 0.15)])
def test_cuda_matches_cpu(ckpt, paged, dtype, tol):
    ids = torch.randint(0, 512, (700,), generator=torch.Generator().manual_seed(1)).tolist()
    splits = [300, 256, 140] + [1] * 4
    cpu = _run(load_model(ckpt), ids, paged, "cpu", splits)
    gpu = _run(load_model(ckpt, device="cuda", dtype=dtype), ids, paged, "cuda", splits)
    assert torch.isfinite(gpu).all()
    err = (gpu - cpu).abs().max().item() / cpu.abs().max().item()
    assert err < tol, err
    if dtype == torch.float32:
        assert (gpu.argmax(-1) == cpu.argmax(-1)).float().mean() > 0.98
