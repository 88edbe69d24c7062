"""Routed experts computed on the CPU, from host memory, for the one-GPU full M3.

Each MoE layer's routed experts live in host RAM in one of the forms of `forms.py` (int8 per
row, int4 per group, MXFP8 as stored, bf16), tiled for the fused kernel of
`cpu_kernel_src.py`. A decode step hands the CPU the layer's input rows and the router's
choice; the kernel reads only the chosen experts' bytes once per step (gate/up, clamped SwiGLU
and down fused per expert, threads over output tiles), so its speed is bounded by host read
bandwidth (bench: bench/offload_cpu_experts.py, bench/offload_vs_llamacpp.py). Without the
kernel (no compiler, another ISA) the same forms run through torch ops.

The torch reference of this op is `reference()` (fp32 on the dequantised weights): the tests
compare the kernel with it, and both with the native engine's own MoE module.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from ..native.layers.mlp import swiglu_oai_merged
from . import forms
from .cpu_kernel import FORM_CODE, KernelLoader
from .forms import quantize_rows_int8
from .plan import ExpertForm

COMPUTED_FORMS = (ExpertForm.INT8, ExpertForm.INT4, ExpertForm.MXFP8, ExpertForm.BF16)
MAX_KERNEL_TOKENS = 8  # the kernel keeps up to 8 tokens per expert in registers
_EMPTY = torch.empty(0, dtype=torch.uint8)

__all__ = [
    "COMPUTED_FORMS",
    "CpuExperts",
    "HostExpertLayer",
    "physical_cores",
    "quantize_rows_int8",
]


@dataclass(frozen=True, slots=True)
class HostExpertLayer:
    """One MoE layer's routed experts in a host form. Every tensor has the expert first:
    w13/s13/m13 the gate and up projections ([2I, h] per expert, tiles alternating gate, up),
    w2/s2/m2 the down projection ([h, I]); s and m are the form's scales and int4 mins."""

    form: ExpertForm
    hidden: int
    inter: int
    w13: torch.Tensor
    w2: torch.Tensor
    s13: torch.Tensor | None = None
    s2: torch.Tensor | None = None
    m13: torch.Tensor | None = None
    m2: torch.Tensor | None = None
    group: int = forms.INT4_GROUP  # int4 only

    @property
    def num_experts(self) -> int:
        return self.w13.shape[0]

    def tensors(self) -> dict[str, torch.Tensor]:
        names = ("w13", "w2", "s13", "s2", "m13", "m2")
        return {n: getattr(self, n) for n in names if getattr(self, n) is not None}

    def expert_bytes(self) -> int:
        """Bytes read for one expert (weights, scales, mins)."""
        return sum(t[0].numel() * t.element_size() for t in self.tensors().values())

    def projection(self, e: int, which: str) -> dict[str, torch.Tensor]:
        """Expert e's tensors of one projection ('13' or '2') as forms.pack returned them."""
        out = {"w": getattr(self, "w" + which)[e]}
        for p in ("s", "m"):
            t = getattr(self, p + which)
            if t is not None:
                out[p] = t[e]
        return out

    def dense(self, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Expert e as fp32 ([2I, h] with gate rows then up rows, [h, I]): the weights the
        reference computes with (and what a GPU would stream for prefill)."""
        w13 = forms.dequantize(self.projection(e, "13"), self.form.value)
        return forms.split_gate_up(w13), forms.dequantize(self.projection(e, "2"), self.form.value)

    @classmethod
    def from_weights(
        cls,
        gate: Sequence[torch.Tensor],
        up: Sequence[torch.Tensor],
        down: Sequence[torch.Tensor],
        form: ExpertForm,
        pin: bool = False,
        group: int = forms.INT4_GROUP,
    ) -> HostExpertLayer:
        """Per-expert float [I, h], [I, h], [h, I] weights -> the host form."""
        if form not in COMPUTED_FORMS:
            raise ValueError(f"the CPU computes experts as int8, int4, mxfp8 or bf16, not {form}")
        packed = [pack_expert(form, g, u, d, group) for g, u, d in zip(gate, up, down, strict=True)]
        return cls.from_packed(form, [p[0] for p in packed], [p[1] for p in packed], group, pin)

    @classmethod
    def from_mxfp8(
        cls,
        gate: Sequence[tuple[torch.Tensor, torch.Tensor]],
        up: Sequence[tuple[torch.Tensor, torch.Tensor]],
        down: Sequence[tuple[torch.Tensor, torch.Tensor]],
        pin: bool = False,
    ) -> HostExpertLayer:
        """The checkpoint's MXFP8 tensors as stored ((e4m3 [N, K], e8m0 [N, K/32]) each),
        re-tiled without touching a value."""
        packed = [pack_mxfp8_expert(g, u, d) for g, u, d in zip(gate, up, down, strict=True)]
        p13, p2 = [p[0] for p in packed], [p[1] for p in packed]
        return cls.from_packed(ExpertForm.MXFP8, p13, p2, forms.INT4_GROUP, pin)

    @classmethod
    def from_packed(
        cls,
        form: ExpertForm,
        p13: Sequence[dict[str, torch.Tensor]],
        p2: Sequence[dict[str, torch.Tensor]],
        group: int = forms.INT4_GROUP,
        pin: bool = False,
    ) -> HostExpertLayer:
        """Per-expert outputs of forms.pack (gate/up interleaved, down) stacked by expert."""

        def stack(ps: Sequence[dict[str, torch.Tensor]], key: str) -> torch.Tensor | None:
            return torch.stack([p[key] for p in ps]) if key in ps[0] else None

        w13, w2 = torch.stack([p["w"] for p in p13]), torch.stack([p["w"] for p in p2])
        hidden = w13.shape[2] * forms.CHUNK[form.value]
        inter = w13.shape[1] * forms.TILE // 2
        layer = cls(
            form,
            hidden,
            inter,
            w13,
            w2,
            stack(p13, "s"),
            stack(p2, "s"),
            stack(p13, "m"),
            stack(p2, "m"),
            group,
        )
        return layer.pinned() if pin else layer

    def pinned(self) -> HostExpertLayer:
        """Page-locked copies (for streaming to the GPU at prefill); needs CUDA."""
        pin = {k: v.pin_memory() for k, v in self.tensors().items()}
        return HostExpertLayer(self.form, self.hidden, self.inter, group=self.group, **pin)


Packed = dict[str, torch.Tensor]


def pack_expert(
    form: ExpertForm, gate: torch.Tensor, up: torch.Tensor, down: torch.Tensor, group: int
) -> tuple[Packed, Packed]:
    """One expert's float weights -> its gate/up and down projections in `form`."""
    if form not in COMPUTED_FORMS:
        raise ValueError(f"the CPU computes experts as int8, int4, mxfp8 or bf16, not {form}")
    w13 = forms.interleave_gate_up(gate.float(), up.float())
    return forms.pack(w13, form.value, group), forms.pack(down.float(), form.value, group)


def pack_mxfp8_expert(
    gate: tuple[torch.Tensor, torch.Tensor],
    up: tuple[torch.Tensor, torch.Tensor],
    down: tuple[torch.Tensor, torch.Tensor],
) -> tuple[Packed, Packed]:
    """One expert's stored MXFP8 (e4m3, e8m0) pairs, re-tiled only."""
    v = forms.interleave_gate_up(gate[0].view(torch.uint8), up[0].view(torch.uint8))
    s = forms.interleave_gate_up(gate[1].view(torch.uint8), up[1].view(torch.uint8))
    return forms.pack_mxfp8(v.view(torch.float8_e4m3fn), s), forms.pack_mxfp8(*down)


def pack_mxfp8_expert_int8(
    gate: tuple[torch.Tensor, torch.Tensor],
    up: tuple[torch.Tensor, torch.Tensor],
    down: tuple[torch.Tensor, torch.Tensor],
) -> tuple[Packed, Packed]:
    """pack_expert(INT8, ...) of one expert's stored MXFP8 pairs, bit for bit, without the
    fp32 copy of each whole matrix (a row's int8 scale is its own, so gate and up are
    quantised apart and their rows interleaved after)."""
    qg, sg = forms.mxfp8_rows_to_int8(*gate)
    qu, su = forms.mxfp8_rows_to_int8(*up)
    qd, sd = forms.mxfp8_rows_to_int8(*down)
    w13 = forms.interleave_gate_up(qg, qu)
    s13 = forms.interleave_gate_up(sg[:, None], su[:, None]).reshape(-1)
    return {"w": forms.tile(w13, 4), "s": s13}, {"w": forms.tile(qd, 4), "s": sd}


def _bytes(t: torch.Tensor | None) -> torch.Tensor:
    """[E, ...] -> [E, bytes] uint8 view (what the kernel indexes by expert)."""
    if t is None:
        return _EMPTY
    return t.reshape(t.shape[0], -1).view(torch.uint8)


class CpuExperts:
    """The routed-expert half of M3's MoE for the layers held in host memory."""

    def __init__(
        self,
        layers: dict[int, HostExpertLayer],
        *,
        alpha: float = 1.702,
        limit: float = 7.0,
        beta: float = 1.0,
        kernel: KernelLoader | None = None,
        use_kernel: bool = True,
    ) -> None:
        self.layers = layers
        self.alpha, self.limit, self.beta = alpha, limit, beta
        self._kernel = (kernel or KernelLoader()) if use_kernel else None
        self._views: dict[int, tuple[torch.Tensor, ...]] = {}

    @property
    def uses_kernel(self) -> bool:
        return self._kernel is not None and self._kernel.module() is not None

    def forward(
        self, layer: int, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """x [T, h] (any dtype, CPU), ids [T, k] int64, weights [T, k] fp32 -> [T, h] fp32:
        sum over the chosen experts of weight x expert(x); shared expert not included."""
        L = self.layers[layer]
        mod = self._kernel.module() if self._kernel is not None else None
        if mod is None:
            return self._torch_forward(L, x, ids, weights)
        views = self._views.get(layer)
        if views is None:  # byte views made once per layer, not per call
            views = tuple(_bytes(getattr(L, n)) for n in ("w13", "s13", "m13", "w2", "s2", "m2"))
            self._views[layer] = views
        x = x.float().contiguous()
        ids = ids.to(torch.int64).contiguous()
        if ids.numel() and not (0 <= int(ids.min()) and int(ids.max()) < L.num_experts):
            raise ValueError(f"expert ids outside 0..{L.num_experts - 1}")  # the kernel trusts them
        weights = weights.float().contiguous()
        code = FORM_CODE[L.form.value]
        outs = []
        for t0 in range(0, x.shape[0], MAX_KERNEL_TOKENS):
            sl = slice(t0, t0 + MAX_KERNEL_TOKENS)
            outs.append(
                mod.moe_forward(
                    code, L.group, x[sl], ids[sl], weights[sl], *views, L.inter,
                    self.alpha, self.limit, self.beta,
                )
            )  # fmt: skip
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def _torch_forward(
        self, L: HostExpertLayer, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """Without the kernel: each chosen expert dequantised to bf16, then torch matmuls."""
        xb = x.to(torch.bfloat16)
        out = torch.zeros(x.shape, dtype=torch.float32)
        for e in torch.unique(ids).tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            w13, w2 = (w.to(torch.bfloat16) for w in L.dense(e))
            h = swiglu_oai_merged((xb[tok] @ w13.t()).float(), self.alpha, self.limit, self.beta)
            y = (h.to(torch.bfloat16) @ w2.t()).float()
            out.index_add_(0, tok, y * weights[tok, slot].float()[:, None])
        return out

    def reference(
        self, layer: int, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """The same op in fp32 on the dequantised weights, one expert at a time (an expert's
        fp32 copy is 226 MB at M3's width: never all of them at once)."""
        L = self.layers[layer]
        out = torch.zeros(x.shape, dtype=torch.float32)
        for e in torch.unique(ids).tolist():
            w13, w2 = L.dense(e)
            for t, j in (ids == e).nonzero().tolist():
                h = swiglu_oai_merged(x[t].float() @ w13.t(), self.alpha, self.limit, self.beta)
                out[t] += weights[t, j].float() * (h @ w2.t())
        return out


def physical_cores(sys_cpu: Path = Path("/sys/devices/system/cpu")) -> int:
    """Cores, not hyper-threads (memory-bound GEMV gains nothing from SMT siblings)."""
    seen = set()
    for topo in sys_cpu.glob("cpu[0-9]*/topology"):
        try:
            seen.add(
                (
                    (topo / "physical_package_id").read_text().strip(),
                    (topo / "core_id").read_text().strip(),
                )
            )
        except OSError:
            continue
    return len(seen) or (os.cpu_count() or 1)
