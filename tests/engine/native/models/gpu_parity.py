"""What test_gpu_model.py and bench/gpu_model_parity.py (its op-by-op bisection) share: the
tiny sparse M3 (top-2 of up to 6 visible blocks), its 700-token prompt cut into chunked
prefill and decode steps, and the run that returns the logits of every position. `paged` is
anything with conftest.py's page_tables / make_caches / build_md (the `paged` fixture; the
bench passes the conftest module)."""

from __future__ import annotations

import torch
from m3agent.engine.native.core.model_api import LayerCache
from m3agent.engine.native.loaders.tiny import TinySpec

SPEC = TinySpec(
    layers=3,
    hidden=256,
    heads=8,
    kv_heads=2,
    experts=4,
    dense_layers=1,
    topk_blocks=2,
    seed=4,
)
SPLITS = [300, 256, 140] + [1] * 4  # three prefill chunks, then four decode steps


def prompt_ids() -> list[int]:
    return torch.randint(
        0, 512, (sum(SPLITS),), generator=torch.Generator().manual_seed(1)
    ).tolist()


def chunked_logits(model, ids: list[int], paged, device, splits: list[int]) -> torch.Tensor:
    """The model's logits [len(ids), vocab] on the CPU, the prompt fed in `splits` steps
    through paged caches on `device` (shuffled pages, the same for every call)."""
    gen = torch.Generator().manual_seed(0)
    nb = -(-len(ids) // 128) + 2
    tables = paged.page_tables([len(ids)], nb, gen)
    caches = [
        LayerCache(kv=c.kv.to(device), index=None if c.index is None else c.index.to(device))
        for c in paged.make_caches(model, nb, dtype=model.info.dtype)
    ]
    out, c0 = [], 0
    for n in splits:
        md = paged.build_md([(c0, n)], tables, device=device)
        h = model.forward(torch.tensor(ids[c0 : c0 + n], device=device), caches, md)
        out.append(model.compute_logits(h).cpu())
        c0 += n
    return torch.cat(out)
