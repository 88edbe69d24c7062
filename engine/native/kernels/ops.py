"""The kernel entry points the model dispatches CUDA tensors to (same names and signatures as
the plain-torch paths in engine/native/layers/msa.py and attention.py)."""

from __future__ import annotations

from .add_rmsnorm import add_rmsnorm
from .dense_attention import dense_attention
from .fused_qknorm_rope import fused_qknorm_rope_insert
from .index_select import index_select_blocks
from .insert import insert_index, insert_kv
from .moe_grouped import grouped_moe
from .moe_router import route
from .sparse_attention import sparse_attention
from .swiglu import swiglu_oai_merged

__all__ = [
    "add_rmsnorm",
    "dense_attention",
    "fused_qknorm_rope_insert",
    "grouped_moe",
    "index_select_blocks",
    "insert_index",
    "insert_kv",
    "route",
    "sparse_attention",
    "swiglu_oai_merged",
]
