"""Small helpers shared by the MSA kernels: dtypes, token->request maps, launch sizes."""

from __future__ import annotations

import torch
from m3agent.engine.native.attention_metadata import BLOCK_SIZE, AttentionMetadata

FP8_DTYPES = (torch.float8_e4m3fn,)
# log2(e): the kernels run the softmax in base 2 (exp2), as SPEC 2.5 says vLLM's do.
LOG2E = 1.4426950408889634


def is_fp8(t: torch.Tensor) -> bool:
    return t.dtype in FP8_DTYPES


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def token_to_request(md: AttentionMetadata, device: torch.device) -> torch.Tensor:
    """[T] int32: the request each flattened token belongs to (built from the host lengths,
    so it never syncs and its size is fixed for a given batch shape)."""
    lens = torch.tensor(md.query_lens_cpu, dtype=torch.int64)
    req = torch.repeat_interleave(torch.arange(len(md.query_lens_cpu), dtype=torch.int32), lens)
    return req.to(device, non_blocking=True)


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


def gather_request_index(index_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Contiguous index keys [seq_len, Di] (fp32) of one request: reference paths only."""
    nb = (seq_len + BLOCK_SIZE - 1) // BLOCK_SIZE
    pages = block_table[:nb].long()
    return index_cache[pages].float().reshape(nb * BLOCK_SIZE, -1)[:seq_len]
