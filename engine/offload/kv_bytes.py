"""What M3's KV cache costs per token, in bytes: stored, moved to the host tier, fetched back
and read by one decode step. The plan sizes the GPU and the host with these; they depend on the
model's shape and the cache's dtype only."""

from __future__ import annotations

from math import ceil

from ..m3.config import M3TextConfig

PAGE = 128  # tokens per KV block


def kv_bytes_per_token(c: M3TextConfig, kv_dtype: str) -> int:
    b = 1 if kv_dtype == "fp8" else 2
    sp = c.sparse_attention_config
    per = 0
    for i in range(c.num_hidden_layers):
        per += 2 * c.num_key_value_heads * c.head_dim * b
        if c.is_sparse_layer(i):
            per += sp.sparse_index_dim * b
    return per


def msa_kv_bytes_per_token(c: M3TextConfig, kv_dtype: str) -> int:
    """The K/V bytes of the MSA layers per token: what the host tier moves to host memory."""
    b = 1 if kv_dtype == "fp8" else 2
    msa = sum(c.is_sparse_layer(i) for i in range(c.num_hidden_layers))
    return msa * 2 * c.num_key_value_heads * c.head_dim * b


def kv_fetch_per_token(c: M3TextConfig, kv_dtype: str, context: int) -> int:
    """Bytes the host tier fetches per decode token when no selected block is cached: every
    KV head's top-k blocks (whole blocks, every head's K/V) in every MSA layer."""
    sp = c.sparse_attention_config
    blocks = min(ceil(context / PAGE), c.num_key_value_heads * sp.sparse_topk_blocks)
    return blocks * PAGE * msa_kv_bytes_per_token(c, kv_dtype)


def kv_read_per_token(c: M3TextConfig, kv_dtype: str, context: int) -> int:
    """KV and index bytes one decode token reads: dense layers read all K/V, MSA layers all
    index keys plus the K/V of their top-k blocks."""
    b = 1 if kv_dtype == "fp8" else 2
    sp = c.sparse_attention_config
    kv_tok = 2 * c.num_key_value_heads * c.head_dim * b
    total = 0
    for i in range(c.num_hidden_layers):
        if c.is_sparse_layer(i):
            selected = min(context, sp.sparse_topk_blocks * sp.sparse_block_size)
            total += context * sp.sparse_index_dim * b + selected * kv_tok
        else:
            total += context * kv_tok
    return total
