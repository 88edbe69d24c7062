"""Sparse GQA attention over the selected blocks (SPEC 2.5), decode and prefill.

Both paths write one partial output (query dtype) + log2-LSE (fp32) per (token, KV head,
partial) and a merge kernel combines them (SPEC 2.7's split-K merge):
- decode (query length 1..8): one program per (token, KV head, chunk of the selection), the
  16 query heads of the group as the rows, online softmax over the chunk's blocks;
- prefill: KV-block-outer. The (token, KV head, slot) -> block lists are inverted into
  per-(KV head, request, block) lists of tokens; one program loads one 128-token K/V page once
  and attends the gathered queries (TT tokens x G heads = 64 or 128 rows) to it, so the
  tensor cores see full tiles instead of 16-row slivers.
FP8 (e4m3) K/V pages are widened to bf16 on load (fp16 in the decode kernel).
This module dispatches; the kernels live in sparse_decode.py, sparse_prefill.py and
split_k_merge.py.
"""

from __future__ import annotations

import torch

from ..core.attention_metadata import AttentionMetadata
from ..layers.msa import sparse_attention as torch_sparse_attention
from .common import token_to_request
from .sparse_decode import (  # noqa: F401  (re-exported)
    decode_chunks,
    sparse_attention_decode,
)
from .sparse_prefill import (  # noqa: F401  (re-exported)
    build_block_work,
    prefill_plan,
    sparse_attention_prefill,
    sparse_attention_prefill_planned,
)
from .split_k_merge import _merge  # noqa: F401  (re-exported)


def sparse_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_idx: torch.Tensor,
    md: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """q [T, Hq, D], topk_idx [T, Hkv, K] logical block ids -> [T, Hq, D]. Decode rows (the
    first num_decodes requests) take the split-K path, the rest the block-outer path."""
    nd = md.num_decodes * md.decode_query_len if md.num_decodes else 0
    if nd == 0 or nd == q.shape[0]:
        fn = sparse_attention_decode if nd else sparse_attention_prefill
        return fn(q, kv_cache, topk_idx, md, scale)
    req = token_to_request(md, q.device)
    out = torch.empty_like(q)
    out[:nd] = sparse_attention_decode(q[:nd], kv_cache, topk_idx[:nd], md, scale, req[:nd])
    out[nd:] = _prefill_tail(q, kv_cache, topk_idx, md, scale, req, nd)
    return out


def _prefill_tail(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_idx: torch.Tensor,
    md: AttentionMetadata,
    scale: float,
    req: torch.Tensor,
    nd: int,
) -> torch.Tensor:
    # The block-outer path indexes tokens absolutely; run it on all rows with the decode
    # rows' selections blanked, and keep the prefill rows.
    sel = topk_idx.clone()
    sel[:nd] = -1
    return sparse_attention_prefill(q, kv_cache, sel, md, scale, req_idx=req)[nd:]


# The torch reference, which is also the CPU path (the op table's sparse_attention); it returns
# q's dtype, so the kernel tests give it float32 queries for a float32 result.
reference = torch_sparse_attention
