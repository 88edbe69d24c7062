"""The op table: the implementation of each dispatched op a model runs, chosen once when the
model is built (M3ForCausalLM and LlamaForCausalLM resolve it and hand it to their layers in
one layers/build.py Build; a layer built on its own resolves its own).

On CUDA with a half-precision model (the kernels are built for bf16/fp16/fp8 tensor-core
tiles) and kernels/ops.py importable: its Triton ops. On the CPU: the references' semantics
through torch's fused CPU attention (cpu_attention.py), the other ops on the references.
Otherwise (float32 models on CUDA as in the parity checks, no triton): the plain-torch
references of this package. `M3AGENT_TORCH_OPS=name,name` (or `all`), read when the table is resolved,
forces the torch reference for those ops: a switch for bisecting a kernel against it.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import cpu_attention
from .attention import dense_attention, insert_index, insert_kv
from .msa import index_select_blocks, sparse_attention
from .router import route

_WIDE = (torch.float32, torch.float64)


@dataclass(frozen=True, slots=True)
class OpTable:
    """Same names and signatures as kernels/ops.py."""

    # the Triton op or the torch reference, interchangeable
    insert_kv: Callable[..., None] = insert_kv
    insert_index: Callable[..., None] = insert_index
    dense_attention: Callable[..., torch.Tensor] = dense_attention
    index_select_blocks: Callable[..., torch.Tensor] = index_select_blocks
    sparse_attention: Callable[..., torch.Tensor] = sparse_attention
    route: Callable[..., tuple[torch.Tensor, torch.Tensor]] = route
    # fused kernels standing for several torch steps; None: the layer runs those steps
    add_rmsnorm: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    swiglu_oai_merged: Callable[..., torch.Tensor] | None = None
    grouped_moe: Callable[..., torch.Tensor] | None = None
    fused_qknorm_rope_insert: Callable[..., None] | None = None


TORCH_REFERENCE = OpTable()
CPU_OPS = dataclasses.replace(
    TORCH_REFERENCE,
    dense_attention=cpu_attention.dense_attention,
    index_select_blocks=cpu_attention.index_select_blocks,
    sparse_attention=cpu_attention.sparse_attention,
)
OP_NAMES = tuple(f.name for f in dataclasses.fields(OpTable))


def resolve_ops(
    device: torch.device | str, dtype: torch.dtype, torch_ops: str | None = None
) -> OpTable:
    """The table for a model of `dtype` on `device`. torch_ops: the ops kept on the torch
    reference (`name,name` or `all`); None reads M3AGENT_TORCH_OPS."""
    forced = os.environ.get("M3AGENT_TORCH_OPS", "") if torch_ops is None else torch_ops
    kept = set(OP_NAMES if forced == "all" else forced.split(",") if forced else ())
    if torch.device(device).type == "cpu":
        fast = {n: getattr(CPU_OPS, n) for n in OP_NAMES if n not in kept}
        return dataclasses.replace(TORCH_REFERENCE, **fast) if kept else CPU_OPS
    if dtype in _WIDE:
        return TORCH_REFERENCE
    try:
        ops = importlib.import_module("m3agent.engine.native.kernels.ops")
    except ImportError:  # no triton, or kernels not built yet: the torch path is correct
        return TORCH_REFERENCE
    kernels = {
        name: getattr(ops, name)
        for name in OP_NAMES
        if name not in kept and getattr(ops, name, None) is not None
    }
    return dataclasses.replace(TORCH_REFERENCE, **kernels)
