"""Small helpers shared by the MSA kernels: dtypes, token->request maps, launch sizes."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata

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


def gather_request_kv(
    kv_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Contiguous K and V [seq_len, Hkv, D] (fp32) of one request: reference paths only."""
    nb = (seq_len + BLOCK_SIZE - 1) // BLOCK_SIZE
    pages = block_table[:nb].long()
    d = kv_cache.shape[-1] // 2
    blocks = kv_cache[pages].float()  # [nb, Hkv, 128, 2D]
    blocks = blocks.permute(0, 2, 1, 3).reshape(nb * BLOCK_SIZE, kv_cache.shape[1], 2 * d)
    return blocks[:seq_len, :, :d], blocks[:seq_len, :, d:]


def gather_request_index(
    index_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int
) -> torch.Tensor:
    """Contiguous index keys [seq_len, Di] (fp32) of one request: reference paths only."""
    nb = (seq_len + BLOCK_SIZE - 1) // BLOCK_SIZE
    pages = block_table[:nb].long()
    return index_cache[pages].float().reshape(nb * BLOCK_SIZE, -1)[:seq_len]


@triton.jit
def online_softmax_step(s, v, m_i, l_i, acc):
    """One KV tile of a base-2 online softmax (SPEC 2.5): s [M, N] log2-scaled scores (-inf
    where masked), v [N, D]; returns the updated running max, sum and accumulator. P is cast
    to V's dtype before P.V, as vLLM's kernels do."""
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc
