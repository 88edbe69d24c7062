"""Small helpers shared by the MSA kernels: dtypes, token->request maps, query tiles (and the
jitted tile_rows that reads one), the references' request gathers."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.attention_metadata import AttentionMetadata

FP8_DTYPES = (torch.float8_e4m3fn,)
# log2(e): the kernels run the softmax in base 2 (exp2), as SPEC 2.5 says vLLM's do.
LOG2E = 1.4426950408889634


def is_fp8(t: torch.Tensor) -> bool:
    return t.dtype in FP8_DTYPES


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def token_to_request(md: AttentionMetadata, device: torch.device) -> torch.Tensor:
    """[T] int32: the request each flattened token belongs to. Device ops only (no host->device
    copy), so it can be captured in a CUDA graph."""
    t = torch.arange(md.num_tokens, device=device, dtype=torch.int32)
    ends = md.query_start_loc[1:].to(device=device, dtype=torch.int32)
    return torch.searchsorted(ends, t, right=True).to(torch.int32)


def query_tiles(
    md: AttentionMetadata, block_t: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split every request's query tokens into tiles of at most block_t rows: per tile its
    request, first token and end token (exclusive), as int32 device tensors."""
    reqs, starts, ends = [], [], []
    start = 0
    for r, qlen in enumerate(md.query_lens_cpu):
        for t0 in range(start, start + qlen, block_t):
            reqs.append(r)
            starts.append(t0)
            ends.append(start + qlen)
        start += qlen

    def dev(x: list[int]) -> torch.Tensor:
        return torch.tensor(x, dtype=torch.int32).to(device, non_blocking=True)

    return dev(reqs), dev(starts), dev(ends)


def query_tile_plan(
    md: AttentionMetadata, block_t: int, device: torch.device
) -> tuple[bool, tuple[torch.Tensor, torch.Tensor, torch.Tensor], int]:
    """(tile_is_req, (tile_req, tile_tok, tile_end), n_tiles) for the kernels that walk query
    tiles (see tile_rows). When every request fits one tile (decode), tile r is request r and
    its rows come straight from query_start_loc: no host->device copy, so a CUDA graph can
    capture the step; otherwise query_tiles' arrays."""
    if max(md.query_lens_cpu) <= block_t:
        qsl = md.query_start_loc
        return True, (qsl, qsl, qsl), md.num_reqs
    tiles = query_tiles(md, block_t, device)
    return False, tiles, tiles[0].shape[0]


@triton.jit
def tile_rows(tile, tiles, pos_ptr, M: tl.constexpr, H: tl.constexpr, TILE_IS_REQ: tl.constexpr):
    """The M = tokens x H rows of query tile `tile` (tiles from query_tile_plan): its request
    (int64), each row's token, head, in-tile flag and position (int32, 0 outside)."""
    tile_req_ptr, tile_tok_ptr, tile_end_ptr = tiles
    if TILE_IS_REQ:  # every request fits one tile: its rows straight from query_start_loc
        req = tile.to(tl.int64)
        t0 = tl.load(tile_tok_ptr + tile)
        t_end = tl.load(tile_tok_ptr + tile + 1)
    else:
        req = tl.load(tile_req_ptr + tile).to(tl.int64)
        t0 = tl.load(tile_tok_ptr + tile)
        t_end = tl.load(tile_end_ptr + tile)
    rows = tl.arange(0, M)
    tok = t0 + rows // H
    head = rows % H
    ok = tok < t_end
    pos = tl.load(pos_ptr + tok, mask=ok, other=0).to(tl.int32)
    return req, tok, head, ok, pos
