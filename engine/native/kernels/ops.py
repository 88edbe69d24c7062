"""The kernel entry points the model dispatches CUDA tensors to (same names and signatures as
the plain-torch paths in engine/native/msa.py and attention.py)."""

from __future__ import annotations

from m3agent.engine.native.kernels.add_rmsnorm import add_rmsnorm
from m3agent.engine.native.kernels.dense_attention import dense_attention
from m3agent.engine.native.kernels.fused_qknorm_rope import fused_qknorm_rope_insert
from m3agent.engine.native.kernels.index_select import index_select_blocks
from m3agent.engine.native.kernels.insert import insert_index, insert_kv
from m3agent.engine.native.kernels.moe_grouped import grouped_moe
from m3agent.engine.native.kernels.moe_router import route
from m3agent.engine.native.kernels.sparse_attention import sparse_attention
from m3agent.engine.native.kernels.swiglu import swiglu_oai_merged

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
