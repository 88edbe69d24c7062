"""Dense causal GQA attention over the paged cache (M3's layers 0-2 and short contexts).

Per request: gather the pages into contiguous K/V and call torch SDPA (flash / cuDNN on CUDA)
with a bottom-right causal mask, since a chunk's queries sit at the end of their context.
Dense layers are 3 of 60, so a gather per request is an acceptable cost.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from m3agent.engine.native.attention_metadata import BLOCK_SIZE, AttentionMetadata
from m3agent.engine.native.kernels.common import gather_request_kv
from torch.nn.attention.bias import causal_lower_right


def _gather(kv_cache: torch.Tensor, block_table: torch.Tensor, seq_len: int, dtype: torch.dtype):
    nb = (seq_len + BLOCK_SIZE - 1) // BLOCK_SIZE
    pages = kv_cache[block_table[:nb].long()]  # [nb, Hkv, 128, 2D]
    hkv, d = pages.shape[1], pages.shape[3] // 2
    kv = pages.permute(1, 0, 2, 3).reshape(hkv, nb * BLOCK_SIZE, 2 * d)[:, :seq_len]
    return kv[..., :d].to(dtype), kv[..., d:].to(dtype)


def dense_attention(q: torch.Tensor, kv_cache: torch.Tensor, md: AttentionMetadata,
                    scale: float) -> torch.Tensor:
    """q [T, Hq, D] -> [T, Hq, D]; query i of request r sits at context_lens[r] + i."""
    out = torch.empty_like(q)
    start = 0
    for r, qlen in enumerate(md.query_lens_cpu):
        if qlen == 0:
            continue
        seq = md.seq_lens_cpu[r]
        k, v = _gather(kv_cache, md.block_tables[r], seq, q.dtype)  # [Hkv, L, D]
        qq = q[start:start + qlen].transpose(0, 1)  # [Hq, qlen, D]
        mask = causal_lower_right(qlen, seq) if qlen > 1 else None
        o = F.scaled_dot_product_attention(qq[None], k[None], v[None], attn_mask=mask,
                                           scale=scale, enable_gqa=True)
        out[start:start + qlen] = o[0].transpose(0, 1)
        start += qlen
    return out


def reference(q: torch.Tensor, kv_cache: torch.Tensor, md: AttentionMetadata, scale: float) -> torch.Tensor:
    """fp32, explicit softmax over keys j <= position."""
    t, hq, d = q.shape
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    start = 0
    for r, qlen in enumerate(md.query_lens_cpu):
        seq = md.seq_lens_cpu[r]
        k, v = gather_request_kv(kv_cache, md.block_tables[r], seq)  # [L, Hkv, D]
        g = hq // k.shape[1]
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        pos = md.positions[start:start + qlen].long()
        s = torch.einsum("thd,lhd->thl", q[start:start + qlen].float(), k) * scale
        s = s.masked_fill(torch.arange(seq, device=q.device)[None, None, :] > pos[:, None, None], float("-inf"))
        out[start:start + qlen] = torch.einsum("thl,lhd->thd", torch.softmax(s, -1), v)
        start += qlen
    return out
