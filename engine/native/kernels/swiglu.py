"""M3's clamped SwiGLU-OAI activation (SPEC 1.6) on the merged gate|up projection output.

gate_up [T, 2I] holds all gates then all ups (vLLM's merged layout); out [T, I] =
min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + beta), in fp32.
One launch instead of the ~8 elementwise torch ops, and one read of gate_up.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..layers.mlp import swiglu_oai_merged as torch_swiglu_merged

_BLOCK = 1024


@triton.jit
def _swiglu_kernel(x_ptr, y_ptr, inter, sx, sy, alpha, limit, beta, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    col = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = col < inter
    g = tl.load(x_ptr + row * sx + col, mask=m, other=0.0).to(tl.float32)
    u = tl.load(x_ptr + row * sx + inter + col, mask=m, other=0.0).to(tl.float32)
    g = tl.minimum(g, limit)
    u = tl.minimum(tl.maximum(u, -limit), limit)
    y = g * tl.sigmoid(alpha * g) * (u + beta)
    tl.store(y_ptr + row * sy + col, y.to(y_ptr.dtype.element_ty), mask=m)


def swiglu_oai_merged(
    gate_up: torch.Tensor, alpha: float = 1.702, limit: float = 7.0, beta: float = 1.0
) -> torch.Tensor:
    t, two_i = gate_up.shape
    inter = two_i // 2
    out = torch.empty((t, inter), dtype=gate_up.dtype, device=gate_up.device)
    if t:
        _swiglu_kernel[(t, triton.cdiv(inter, _BLOCK))](
            gate_up,
            out,
            inter,
            gate_up.stride(0),
            out.stride(0),
            alpha,
            limit,
            beta,
            BLOCK=_BLOCK,
            num_warps=4,
        )
    return out


def reference(
    gate_up: torch.Tensor, alpha: float = 1.702, limit: float = 7.0, beta: float = 1.0
) -> torch.Tensor:
    """The torch path (layers/mlp.py) in fp32, returned in the input dtype like the kernel."""
    return torch_swiglu_merged(gate_up.float(), alpha, limit, beta).to(gate_up.dtype)
