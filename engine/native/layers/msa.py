"""MiniMax Sparse Attention in plain torch (SPEC §2.3-2.5): block scoring, top-k block
selection per index head, sparse GQA over the selected blocks. The references of the Triton
ops of the same names (kernels/ops.py) and the CPU path, reached through the op table like
attention.py's.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from .attention import masked_gqa, query_chunks, to_cache

# Forced blocks outrank every real score; local above init as in vLLM's kernels (order is
# not part of the contract, only the set is).
_INIT_SCORE = 2e30
_LOCAL_SCORE = 3e30
_SCORE_CLAMP = 1e30


def block_scores(iq: torch.Tensor, ik: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """iq [t, H, Di], ik [nb*128, Di] (all of the request's pages), pos [t] ->
    S [t, H, nb] fp32: max over the block's keys j <= pos of iq . ik[j]; -inf when none."""
    s = torch.einsum("thd,ld->thl", iq.float(), ik.float())
    j = torch.arange(ik.shape[0], device=iq.device)
    s = s.masked_fill((j[None, :] > pos[:, None])[:, None, :], float("-inf"))
    t, h, n = s.shape
    return s.view(t, h, n // BLOCK_SIZE, BLOCK_SIZE).amax(-1)


def index_queries(iq: torch.Tensor, index_cache: torch.Tensor) -> torch.Tensor:
    """The index queries an index cache is scored with: an e4m3 cache's are quantised to e4m3
    too (saturated to +-448), as vLLM's fused op and our kernel do; others score iq as it is."""
    if index_cache.dtype == torch.float8_e4m3fn and iq.dtype != index_cache.dtype:
        return to_cache(iq, index_cache.dtype)
    return iq


def selection_keys(
    scores: torch.Tensor, pos: torch.Tensor, init_blocks: int, local_blocks: int
) -> torch.Tensor:
    """scores [t, H, nb] -> what the top-k ranks: the scores clamped to +-1e30, the forced
    blocks (init, local) above every score, blocks past the query's position -inf."""
    nb = scores.shape[-1]
    nvis = (pos // BLOCK_SIZE + 1)[:, None, None]  # [t, 1, 1]
    b = torch.arange(nb, device=scores.device)[None, None, :]
    key = torch.nan_to_num(
        scores, nan=-_SCORE_CLAMP, posinf=_SCORE_CLAMP, neginf=-_SCORE_CLAMP
    ).clamp(-_SCORE_CLAMP, _SCORE_CLAMP)
    key = torch.where(b < init_blocks, torch.full_like(key, _INIT_SCORE), key)
    key = torch.where(b >= nvis - local_blocks, torch.full_like(key, _LOCAL_SCORE), key)
    return torch.where(b < nvis, key, torch.full_like(key, float("-inf")))


def select_from_scores(
    scores: torch.Tensor, pos: torch.Tensor, topk: int, init_blocks: int, local_blocks: int
) -> torch.Tensor:
    """scores [t, H, nb] -> [t, H, topk] int32: forced blocks + best others, -1 padded."""
    t, h, nb = scores.shape
    nvis = (pos // BLOCK_SIZE + 1)[:, None, None]  # [t, 1, 1]
    key = selection_keys(scores, pos, init_blocks, local_blocks)
    k = min(topk, nb)
    idx = torch.topk(key, k, dim=-1).indices  # sorted: the visible blocks come first
    slot = torch.arange(k, device=scores.device)[None, None, :]
    idx = torch.where(slot < torch.clamp(nvis, max=topk), idx, torch.full_like(idx, -1))
    out = torch.full((t, h, topk), -1, dtype=torch.int32, device=scores.device)
    out[..., :k] = idx.to(torch.int32)
    return out


def _chunk_scores(
    iq: torch.Tensor, index_cache: torch.Tensor, md: AttentionMetadata
) -> Iterator[tuple[slice, torch.Tensor, torch.Tensor]]:
    """(query rows, their positions, block scores [rows, H, the request's blocks]) for each
    chunk of each request's queries: what index_select_blocks ranks and index_selection_keys
    reports, scored the same way for both."""
    for ik, _sl, rows, pos in query_chunks(md, index_cache, iq.shape[1]):
        yield rows, pos, block_scores(index_queries(iq[rows], index_cache), ik, pos)


def index_select_blocks(
    iq: torch.Tensor,
    index_cache: torch.Tensor,
    md: AttentionMetadata,
    topk: int,
    init_blocks: int = 0,
    local_blocks: int = 1,
) -> torch.Tensor:
    """iq [T, H, Di] (normed, roped) -> [T, H, topk] int32 logical block ids per index head
    (no cross-head reduction); forced blocks always present; -1 pads min(topk, nvis)..topk."""
    t_all, h, _ = iq.shape
    out = torch.full((t_all, h, topk), -1, dtype=torch.int32, device=iq.device)
    for rows, pos, scores in _chunk_scores(iq, index_cache, md):
        out[rows] = select_from_scores(scores, pos, topk, init_blocks, local_blocks)
    return out


def index_selection_keys(
    iq: torch.Tensor,
    index_cache: torch.Tensor,
    md: AttentionMetadata,
    init_blocks: int = 0,
    local_blocks: int = 1,
) -> torch.Tensor:
    """[T, H, blocks of the block table] fp32: the keys index_select_blocks ranks for each
    query (selection_keys; -inf past a request's blocks). A kernel's selection is checked
    against them (kernels/checks.py: a differing block must tie with the cut-off)."""
    t_all, h, _ = iq.shape
    nb = md.block_tables.shape[1]
    out = torch.full((t_all, h, nb), float("-inf"), dtype=torch.float32, device=iq.device)
    for rows, pos, scores in _chunk_scores(iq, index_cache, md):
        out[rows, :, : scores.shape[-1]] = selection_keys(scores, pos, init_blocks, local_blocks)
    return out


def sparse_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_idx: torch.Tensor,
    md: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """q [T, Hq, D]; query head qh of KV group g = qh // (Hq/Hkv) attends to the keys j <= pos
    of the blocks topk_idx[t, g] (SPEC §2.5). Exact softmax in fp32 -> [T, Hq, D]."""
    out = torch.empty_like(q)
    hkv = kv_cache.shape[1]
    for kv, sl, rows, pos in query_chunks(md, kv_cache, q.shape[1]):
        nb = kv.shape[1] // BLOCK_SIZE
        j = torch.arange(kv.shape[1], device=q.device)
        sel = topk_idx[rows].long()  # [t, Hkv, K]
        nvis = (pos // BLOCK_SIZE + 1)[:, None, None]
        ok = (sel >= 0) & (sel < nvis) & (sel < nb)  # ids past the visible range: skipped
        chosen = torch.zeros(sel.shape[0], hkv, nb + 1, dtype=torch.bool, device=q.device)
        chosen.scatter_(2, torch.where(ok, sel, nb), True)
        blocks = chosen[..., :nb].repeat_interleave(BLOCK_SIZE, dim=2)  # [t, Hkv, L]
        causal = (j[None, :] <= pos[:, None]) & (j[None, :] < sl)
        out[rows] = masked_gqa(q[rows], kv, blocks & causal[:, None, :], scale)
    return out
