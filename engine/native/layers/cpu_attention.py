"""The CPU path of the attention ops: the semantics of the torch references (attention.py,
msa.py) without their prefix-long score tensors.

The references score every query against every key of its request in float32 tensors of
[rows, heads, L], mask them, softmax them and multiply again: a long prefill on the CPU spent
most of its time streaming those tensors through memory, not on arithmetic. Here:

- dense attention: torch's fused CPU flash attention (online softmax, no score tensor) in two
  parts merged by their log-sum-exp: the prefix before the chunk, seen whole by every query of
  the chunk (the query heads of a KV group stacked as rows, so K/V are read once and never
  repeated per head), and the chunk's own keys, causal (a square, so top-left causal is right);
- sparse attention, for a row tile of a request: while the blocks its rows selected between
  them are at most twice one row's top-k (short contexts), the same kernel over that union
  with an additive mask for each row's own blocks and causality; past that (long contexts,
  where rows scatter their picks over the whole prefix), block by block: each selected
  (KV head, block) is read once for all the rows that chose it in one batched GEMM, so the
  work per token is its top-k x 128 keys' whatever the context;
- index scoring: the reference's scores, masked only in the blocks a query's position cuts
  (every other block is wholly visible to every row of the chunk).

Outputs equal the references' up to float32 rounding and the top-k selection is the
reference's own (tests/engine/native/models/test_cpu_attention.py; test_msa.py holds the
references to SPEC §2.8 brute force). The fused kernel is aten's CPU flash attention op,
called directly because it also returns each row's log-sum-exp.
"""

from __future__ import annotations

import torch

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from .attention import gather_pages, query_chunks, request_rows
from .msa import index_queries, select_from_scores

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
# Elements of one sparse row tile's additive mask [Hkv, rows, union keys] (fp32): 32 MiB.
_MASK_ELEMS = 1 << 23
# A row tile attends densely over the union of its rows' blocks while that union holds at
# most this many times one row's selection; past it, block by block (_block_rows).
_UNION_BLOCKS_PER_ROW_SELECTION = 2
# Elements of a block-major tile's per-pair scores [rows, Hkv, K, Hq/Hkv, 128] (fp32): 64 MiB.
_PAIR_ELEMS = 1 << 24
_WIDE = (torch.float32, torch.float64)
# The allocation whose unselected blocks are never written (a test fills it with NaN instead).
_unwritten = torch.empty


def _attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    causal: bool = False,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """q [B, H, Lq, D], k/v [B, H, Lk, D] (any strides) -> out [B, H, Lq, D] in q's dtype and
    the natural log-sum-exp of each row's scores [B, H, Lq] (fp32). A row with no allowed key
    comes out 0, as the references' nan_to_num makes it."""
    out, lse = _flash(q, k, v, 0.0, causal, attn_mask=mask, scale=scale)[:2]
    return out, lse


def _wide(x: torch.Tensor) -> torch.Tensor:
    """The references do their maths in fp32: so does this path for a half-precision model."""
    return x if x.dtype in _WIDE else x.float()


def _dense_rows(q: torch.Tensor, kv: torch.Tensor, context: int, scale: float) -> torch.Tensor:
    """q [t, Hq, D] at positions context..context+t-1; kv [Hkv, >= context+t, 2D] the
    request's keys in token order -> [t, Hq, D]."""
    t, hq, d = q.shape
    hkv = kv.shape[0]
    g = hq // hkv
    q, kv = _wide(q), _wide(kv)
    own = kv[:, context : context + t].repeat_interleave(g, 0)[None]  # [1, Hq, t, 2D]
    o, lse = _attend(q.transpose(0, 1)[None], own[..., :d], own[..., d:], scale, causal=True)
    o, lse = o[0], lse[0]  # [Hq, t, D], [Hq, t]
    if context > 0:
        # the prefix is visible to every row: a KV group's query heads become rows of one head
        rows = q.view(t, hkv, g, d).permute(1, 2, 0, 3).reshape(1, hkv, g * t, d)
        prefix = kv[None, :, :context]
        op, lp = _attend(rows, prefix[..., :d], prefix[..., d:], scale)
        op, lp = op.reshape(hq, t, d), lp.reshape(hq, t)
        m = torch.maximum(lse, lp)
        w_own, w_pre = (lse - m).exp(), (lp - m).exp()
        o = (o * w_own[..., None] + op * w_pre[..., None]) / (w_own + w_pre)[..., None]
    return o.transpose(0, 1)


def dense_attention(
    q: torch.Tensor, kv_cache: torch.Tensor, md: AttentionMetadata, scale: float
) -> torch.Tensor:
    """attention.dense_attention's contract: q [T, Hq, D] -> [T, Hq, D], query i of request r
    at context_lens[r] + i sees keys 0..context_lens[r] + i."""
    out = torch.empty_like(q)
    for r, q0, ql, cl, sl in request_rows(md):
        if ql == 0:
            continue
        kv = gather_pages(kv_cache, md.block_tables[r], sl)
        out[q0 : q0 + ql] = _dense_rows(q[q0 : q0 + ql], kv, cl, scale).to(q.dtype)
    return out


def _tile_rows(hkv: int, keys: int) -> int:
    return max(16, _MASK_ELEMS // max(1, hkv * keys))


def sparse_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    topk_idx: torch.Tensor,
    md: AttentionMetadata,
    scale: float,
) -> torch.Tensor:
    """msa.sparse_attention's contract: query head qh of KV group g attends to the keys
    j <= pos of the blocks topk_idx[t, g]; ids < 0 or past the visible blocks are skipped."""
    out = torch.empty_like(q)
    hkv = kv_cache.shape[1]
    for r, q0, ql, _cl, sl in request_rows(md):
        if ql == 0:
            continue
        kv = _selected_pages(kv_cache, md.block_tables[r], sl, topk_idx[q0 : q0 + ql])
        k = topk_idx.shape[2]
        by_block = -(-sl // BLOCK_SIZE) > _UNION_BLOCKS_PER_ROW_SELECTION * k
        step = _PAIR_ELEMS // (hkv * k * q.shape[1]) if by_block else _tile_rows(hkv, sl)
        for c0 in range(q0, q0 + ql, max(16, step)):
            rows = slice(c0, min(q0 + ql, c0 + max(16, step)))
            o = _sparse_rows(q[rows], kv, topk_idx[rows], md.positions[rows], scale)
            out[rows] = o.to(q.dtype)
    return out


def _selected_pages(
    cache: torch.Tensor, table_row: torch.Tensor, seq_len: int, sel: torch.Tensor
) -> torch.Tensor:
    """gather_pages' [Hkv, nb*128, 2D] for the rows whose selections are `sel`, in the maths'
    dtype. When they name few of the request's blocks (decode and short chunks over a long
    prefix) only those are copied: both sparse paths read nothing else, so the rest is left
    unwritten and a decode step costs its top-k blocks, not the whole prefix."""
    nb = -(-seq_len // BLOCK_SIZE)
    ids = torch.unique(sel[(sel >= 0) & (sel < nb)]).long()  # Tensor.unique is untyped
    if 2 * ids.numel() > nb:
        return _wide(gather_pages(cache, table_row, seq_len))
    hkv, width = cache.shape[1], cache.shape[3]
    dtype = cache.dtype if cache.dtype in _WIDE else torch.float32
    kv = _unwritten((hkv, nb, BLOCK_SIZE, width), dtype=dtype, device=cache.device)
    kv[:, ids] = cache[table_row[ids].long()].permute(1, 0, 2, 3).to(dtype)
    return kv.view(hkv, nb * BLOCK_SIZE, width)


def _sparse_rows(
    q: torch.Tensor, kv: torch.Tensor, sel: torch.Tensor, pos: torch.Tensor, scale: float
) -> torch.Tensor:
    """One row tile of a request: q [t, Hq, D], kv [Hkv, nb*128, 2D] the request's keys in
    token order, sel [t, Hkv, K] logical block ids -> [t, Hq, D].

    The policy: when the tile's rows between them selected few more blocks than one row
    does (short contexts, or rows that agree), attend densely over that union; otherwise
    (long contexts, scattered selections) block by block, so the work is the selected keys'
    whatever the context."""
    t, hkv, k = sel.shape
    nb = kv.shape[1] // BLOCK_SIZE
    sel = sel.long().sort(-1).values
    nvis = (pos // BLOCK_SIZE + 1)[:, None, None]
    ok = (sel >= 0) & (sel < nvis) & (sel < nb)
    ok[..., 1:] &= sel[..., 1:] != sel[..., :-1]  # a block listed twice counts once
    chosen = torch.zeros(t, hkv, nb + 1, dtype=torch.bool, device=q.device)
    chosen.scatter_(2, torch.where(ok, sel, nb), True)
    chosen = chosen[..., :nb]
    used = chosen.any(1).any(0).nonzero().squeeze(1)  # the tile's blocks, in order [U]
    if used.shape[0] <= _UNION_BLOCKS_PER_ROW_SELECTION * k:
        return _union_rows(q, kv, chosen, used, pos, scale)
    return _block_rows(q, kv, sel, ok, pos, scale)


def _union_rows(
    q: torch.Tensor,
    kv: torch.Tensor,
    chosen: torch.Tensor,
    used: torch.Tensor,
    pos: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Flash attention over the union `used` of the tile's blocks, each row masked to its
    own (`chosen` [t, Hkv, nb]) and to causality."""
    t, hq, d = q.shape
    hkv = kv.shape[0]
    g = hq // hkv
    nb = kv.shape[1] // BLOCK_SIZE
    u = used.shape[0]
    if u == int(used[-1]) + 1:  # every block up to the last used one: a view, no copy
        keys = kv[:, : u * BLOCK_SIZE]
    else:
        keys = kv.view(hkv, nb, BLOCK_SIZE, 2 * d)[:, used].reshape(hkv, u * BLOCK_SIZE, 2 * d)
    # the additive mask [t, Hkv, U*128]: each row's own blocks, then causality where a row's
    # position cuts the keys (only the columns past the tile's first position)
    mask = torch.zeros(t, hkv, u, dtype=kv.dtype, device=q.device)
    mask.masked_fill_(~chosen[:, :, used], float("-inf"))
    mask = mask[..., None].expand(t, hkv, u, BLOCK_SIZE).contiguous().view(t, hkv, -1)
    key_pos = (used[:, None] * BLOCK_SIZE + torch.arange(BLOCK_SIZE, device=q.device)).view(-1)
    lo = int(torch.searchsorted(key_pos, pos.min(), right=True))
    future = key_pos[None, lo:] > pos[:, None]  # [t, U*128 - lo]
    mask[..., lo:].masked_fill_(future[:, None, :], float("-inf"))
    # the G query heads of a KV group as the batch: K/V and the mask broadcast over it
    qg = _wide(q).view(t, hkv, g, d).permute(2, 1, 0, 3)  # [G, Hkv, t, D]
    k = keys[None, ..., :d].expand(g, -1, -1, -1)
    v = keys[None, ..., d:].expand(g, -1, -1, -1)
    o, _ = _attend(qg, k, v, scale, mask=mask.permute(1, 0, 2)[None])
    return o.permute(2, 1, 0, 3).reshape(t, hq, d)  # [t, Hkv, G, D] -> head h*G + g


def _block_rows(
    q: torch.Tensor,
    kv: torch.Tensor,
    sel: torch.Tensor,
    ok: torch.Tensor,
    pos: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Block-major sparse attention: each selected (KV head, block) is read once for all the
    tile's rows that chose it, as one batched GEMM over the blocks (rows padded to what 90% of
    the blocks hold; a block chosen by more rows is split); the scores come back in each row's own [K, G, 128] order for the softmax.
    sel, ok [t, Hkv, K]: the rows' block ids and which of them count."""
    t, hq, d = q.shape
    hkv = kv.shape[0]
    g = hq // hkv
    k = sel.shape[2]
    nb = kv.shape[1] // BLOCK_SIZE
    dev = q.device
    flat_ok = ok.view(-1)
    slot = flat_ok.nonzero().squeeze(1)  # the (row, head, k) slots that count [P]
    dropped = (~flat_ok).nonzero().squeeze(1)
    row_head = slot // k  # row * Hkv + head
    blk = sel.view(-1)[slot]
    # a slot's group: its (head, block), numbered as kv's [Hkv * nb] pages
    groups, inv, counts = torch.unique(
        (row_head % hkv) * nb + blk, return_inverse=True, return_counts=True
    )
    order = torch.argsort(inv, stable=True)
    starts = torch.cumsum(counts, 0) - counts
    rank = torch.empty_like(inv)
    rank[order] = torch.arange(inv.shape[0], device=dev) - starts[inv[order]]
    # Rows per GEMM: a group holding more (the chunk's own blocks, a block every row likes)
    # is split into pieces of r rows, so one hot block does not pad every other to its size.
    r = max(1, int(counts.float().quantile(0.9)))
    pieces = (counts + r - 1) // r
    first = torch.cumsum(pieces, 0) - pieces
    at = (first[inv] + rank // r) * r + rank % r  # each slot's row in the padded [n * r] layout
    n = int(pieces.sum())
    at_all = torch.zeros(t * hkv * k, dtype=at.dtype, device=dev)  # dropped slots: row 0
    at_all[slot] = at
    pages = groups.repeat_interleave(pieces)
    blocks = kv.reshape(hkv * nb, BLOCK_SIZE, 2 * d).index_select(0, pages)  # [n, 128, 2D]
    # padding rows stay uninitialised: a GEMM row only feeds its own output row, never read
    qw = (_wide(q) * scale).reshape(t * hkv, g, d)
    qpad = torch.empty(n * r, g, d, dtype=blocks.dtype, device=dev)
    qpad.index_copy_(0, at, qw.index_select(0, row_head))
    s = torch.bmm(qpad.view(n, r * g, d), blocks[..., :d].transpose(1, 2))
    x = s.view(n * r, g, BLOCK_SIZE).index_select(0, at_all)  # [t * Hkv * K, G, 128]
    x.index_fill_(0, dropped, float("-inf"))
    # causality: only the slots of a row's own last block hold keys past its position
    rows = row_head // hkv
    own = (blk == pos[rows] // BLOCK_SIZE).nonzero().squeeze(1)
    future = torch.arange(BLOCK_SIZE, device=dev)[None, :] > (pos[rows[own]] % BLOCK_SIZE)[:, None]
    x[slot[own]] = x[slot[own]].masked_fill_(future[:, None, :], float("-inf"))
    # softmax over each (row, head, g)'s K x 128 keys, in place
    x5 = x.view(t, hkv, k, g, BLOCK_SIZE)
    m = x5.amax(dim=(2, 4), keepdim=True)
    m.masked_fill_(m == float("-inf"), 0.0)  # a row with no allowed key comes out 0
    x5.sub_(m).exp_()
    x5.div_(x5.sum(dim=(2, 4), keepdim=True).clamp_min_(torch.finfo(x.dtype).tiny))
    ppad = torch.empty(n * r, g, BLOCK_SIZE, dtype=s.dtype, device=dev)
    ppad.index_copy_(0, at, x if dropped.numel() == 0 else x.index_select(0, slot))
    o = torch.bmm(ppad.view(n, r * g, BLOCK_SIZE), blocks[..., d:]).view(n * r, g, d)
    o = o.index_select(0, at_all).index_fill_(0, dropped, 0.0)
    return o.view(t, hkv, k, g, d).sum(2).view(t, hq, d)


def _block_scores(iq: torch.Tensor, ik: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """msa.block_scores' result, masking only the blocks a row's position cuts: [t, H, nb]."""
    s = torch.einsum("thd,ld->thl", iq.float(), ik.float())
    t, h, n = s.shape
    nb = n // BLOCK_SIZE
    scores = s.view(t, h, nb, BLOCK_SIZE).amax(-1)
    lo = int(pos.min()) // BLOCK_SIZE  # every block before lo is wholly visible to every row
    tail = s[..., lo * BLOCK_SIZE :]
    j = torch.arange(lo * BLOCK_SIZE, n, device=iq.device)
    tail = tail.masked_fill((j[None, :] > pos[:, None])[:, None, :], float("-inf"))
    scores[..., lo:] = tail.view(t, h, nb - lo, BLOCK_SIZE).amax(-1)
    return scores


def index_select_blocks(
    iq: torch.Tensor,
    index_cache: torch.Tensor,
    md: AttentionMetadata,
    topk: int,
    init_blocks: int = 0,
    local_blocks: int = 1,
) -> torch.Tensor:
    """msa.index_select_blocks' contract and selection: [T, H, topk] int32 block ids."""
    t_all, h, _ = iq.shape
    out = torch.full((t_all, h, topk), -1, dtype=torch.int32, device=iq.device)
    for ik, _sl, rows, pos in query_chunks(md, index_cache, h):
        scores = _block_scores(index_queries(iq[rows], index_cache), ik, pos)
        out[rows] = select_from_scores(scores, pos, topk, init_blocks, local_blocks)
    return out
