"""Paged cache inserts and dense causal GQA over the paged cache, in plain torch.

These are the references of the Triton ops of the same names (kernels/ops.py) and the CPU
path; a model reaches either through its op table (op_table.py), chosen when it is built.

Layouts (attention_metadata.py): kv_cache [num_blocks, Hkv, 128, 2*D] (K then V),
index_cache [num_blocks, 128, Di], slot = physical_block * 128 + offset; slot < 0 is padding.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata

# Query rows processed at once by the reference: bounds the [rows, Hq, L] fp32 score tensor
# (and its softmax) to ~256 MiB however long the context.
_SCORE_ELEMS = 1 << 26
FP8_MAX = 448.0  # e4m3's largest finite value


def q_chunk(heads: int, seq_len: int) -> int:
    return max(1, min(256, _SCORE_ELEMS // max(1, heads * seq_len)))


def to_cache(x: torch.Tensor, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    """Cast for storing (an fp8 cache holds x / scale); e4m3 has no inf, so values past its
    range saturate instead of becoming NaN."""
    if dtype == torch.float8_e4m3fn:
        return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(dtype)
    return x.to(dtype)


def insert_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    scale: float = 1.0,
) -> None:
    """k, v [T, Hkv, D] -> written into kv_cache at slot_mapping [T] (a negative slot is
    padding)."""
    d = k.shape[-1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    blk, off = slots // BLOCK_SIZE, slots % BLOCK_SIZE
    kv_cache[blk, :, off, :d] = to_cache(k[keep], kv_cache.dtype, scale)
    kv_cache[blk, :, off, d:] = to_cache(v[keep], kv_cache.dtype, scale)


def insert_index(
    ik: torch.Tensor, index_cache: torch.Tensor, slot_mapping: torch.Tensor, scale: float = 1.0
) -> None:
    """ik [T, Di] -> written into index_cache at slot_mapping [T]."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    index_cache[slots // BLOCK_SIZE, slots % BLOCK_SIZE] = to_cache(
        ik[keep], index_cache.dtype, scale
    )


def request_rows(md: AttentionMetadata) -> Iterator[tuple[int, int, int, int, int]]:
    """(request, first query row, query length, context length, seq length) per request."""
    start = 0
    for r, (ql, cl, sl) in enumerate(
        zip(md.query_lens_cpu, md.context_lens_cpu, md.seq_lens_cpu, strict=True)
    ):
        yield r, start, ql, cl, sl
        start += ql


def gather_pages(cache: torch.Tensor, block_table_row: torch.Tensor, seq_len: int) -> torch.Tensor:
    """The first ceil(seq_len/128) logical pages of a request, concatenated in token order.
    kv_cache -> [Hkv, nb*128, 2D]; index_cache -> [nb*128, Di]."""
    nb = -(-seq_len // BLOCK_SIZE)
    pages = cache[block_table_row[:nb].long()]
    if cache.dim() == 4:
        return pages.permute(1, 0, 2, 3).reshape(cache.shape[1], nb * BLOCK_SIZE, cache.shape[3])
    return pages.reshape(nb * BLOCK_SIZE, cache.shape[2])


def query_chunks(
    md: AttentionMetadata, cache: torch.Tensor, heads: int
) -> Iterator[tuple[torch.Tensor, int, slice, torch.Tensor]]:
    """(pages, seq length, query rows, their positions) for each request with queries in this
    step: its pages gathered once (gather_pages), its rows in chunks that bound the
    references' [rows, heads, L] score tensor (q_chunk)."""
    for r, q0, ql, _cl, sl in request_rows(md):
        if ql == 0:
            continue
        pages = gather_pages(cache, md.block_tables[r], sl)
        step = q_chunk(heads, pages.shape[-2])
        for c0 in range(0, ql, step):
            rows = slice(q0 + c0, q0 + min(ql, c0 + step))
            yield pages, sl, rows, md.positions[rows]


def masked_gqa(
    q: torch.Tensor, kv: torch.Tensor, allowed: torch.Tensor, scale: float
) -> torch.Tensor:
    """q [t, Hq, D], kv [Hkv, L, 2D], allowed [t, Hkv, L] bool -> [t, Hq, D] (fp32 maths)."""
    t, hq, d = q.shape
    hkv = kv.shape[0]
    g = hq // hkv
    k, v = kv[..., :d].float(), kv[..., d:].float()
    qf = q.float().view(t, hkv, g, d)
    s = torch.einsum("thgd,hld->thgl", qf, k) * scale
    s = s.masked_fill(~allowed[:, :, None, :], float("-inf"))
    p = torch.softmax(s, dim=-1)
    p = torch.nan_to_num(p, nan=0.0)  # a row with no allowed key (cannot happen causally)
    o = torch.einsum("thgl,hld->thgd", p, v)
    return o.reshape(t, hq, d).to(q.dtype)


def dense_attention(
    q: torch.Tensor, kv_cache: torch.Tensor, md: AttentionMetadata, scale: float
) -> torch.Tensor:
    """Paged causal GQA: q [T, Hq, D] -> [T, Hq, D]; token at position p sees keys 0..p."""
    out = torch.empty_like(q)
    hkv = kv_cache.shape[1]
    for kv, sl, rows, pos in query_chunks(md, kv_cache, q.shape[1]):
        j = torch.arange(kv.shape[1], device=q.device)
        allowed = (j[None, :] <= pos[:, None]) & (j[None, :] < sl)
        allowed = allowed[:, None, :].expand(-1, hkv, -1)
        out[rows] = masked_gqa(q[rows], kv, allowed, scale)
    return out
