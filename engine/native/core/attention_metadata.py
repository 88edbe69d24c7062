"""Per-step attention metadata, passed explicitly to every layer (no globals).

The flattened batch holds T tokens of R requests, request-major. Query token i of request r
sits at absolute position context_lens[r] + i. Paged caches (one 128-token page == one MSA
block; one block table per request serves every layer):

  main cache per layer:  kv_cache    [num_blocks, num_kv_heads, 128, 2 * head_dim]
                         (K = [..., :head_dim], V = [..., head_dim:])  -- vLLM's M3 layout
  index cache per MSA layer: index_cache [num_blocks, 128, index_dim]
  slot = physical_block * 128 + offset_in_block
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK_SIZE = 128


@dataclass(frozen=True, slots=True)
class AttentionMetadata:
    positions: torch.Tensor  # [T] int64, absolute positions
    slot_mapping: torch.Tensor  # [T] int64, where each new token's K/V (and index key) go
    query_start_loc: torch.Tensor  # [R + 1] int32, cumulative query lengths (cu_seqlens_q)
    seq_lens: torch.Tensor  # [R] int32, context + new tokens
    context_lens: torch.Tensor  # [R] int32, num_computed_tokens before this step
    block_tables: torch.Tensor  # [R, max_blocks] int32, physical page ids (padding: 0)
    # Host copies, so reference paths and launch-size decisions never sync with the device.
    query_lens_cpu: tuple[int, ...]
    seq_lens_cpu: tuple[int, ...]
    context_lens_cpu: tuple[int, ...]
    # Decode rows (query length == decode_query_len) come first; 0 in a pure prefill step.
    num_decodes: int = 0
    decode_query_len: int = 1

    @property
    def num_tokens(self) -> int:
        return int(self.positions.shape[0])

    @property
    def num_reqs(self) -> int:
        return len(self.seq_lens_cpu)
