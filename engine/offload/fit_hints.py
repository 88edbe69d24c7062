"""For a plan that does not fit: the nearest plans that do, in one line (`model plan` and
`doctor` print it). Each hint is checked by planning it."""

from __future__ import annotations

from dataclasses import replace

from ..m3.config import M3TextConfig
from .hardware import GIB, Machine
from .inventory import Inventory
from .kv_bytes import PAGE
from .plan import GPU_MARGIN, ExpertForm, PlanRequest, make_plan


def what_would_fit(c: M3TextConfig, inv: Inventory, m: Machine, req: PlanRequest) -> str:
    """For a plan that does not fit: the nearest plans that do, in one line."""
    plan = make_plan(c, inv, m, req)
    hints = []
    if plan.total("gpu") > plan.gpu_capacity:
        if plan.kv_host_tier and req.stream_experts > 8:
            half = replace(req, stream_experts=req.stream_experts // 2)
            if make_plan(c, inv, m, half).total("gpu") <= plan.gpu_capacity:
                hints.append(f"--stream-experts {half.stream_experts}")
        # the longest context with the whole KV on the GPU
        whole = make_plan(c, inv, m, replace(req, kv_host_tier=False))
        # the KV rows (the planned context's and the pages serve adds) are what shrinks
        fixed = whole.total("gpu") - sum(r.nbytes for r in whole.rows if r.label.startswith("KV"))
        room = int(plan.gpu_capacity * (1 - GPU_MARGIN)) - fixed
        tokens = room // (plan.kv_bytes_per_token * req.max_seqs) // PAGE * PAGE
        if tokens >= PAGE:
            hints.append(f"--context {tokens:,}")
        if req.kv_cache_dtype == "bf16":
            hints.append("--kv-cache-dtype fp8")
        if not hints:
            hints.append(f"a GPU with {plan.total('gpu') / GIB:.0f} GiB")
    if plan.total("host") > plan.host_capacity:
        if plan.expert_form is ExpertForm.BF16:
            alt = make_plan(c, inv, m, replace(req, expert_form=ExpertForm.INT8))
            if alt.total("host") <= alt.host_capacity:
                hints.append("--expert-form int8")
        layers = plan.moe_layers_on_host - 1
        while layers > 0 and not _host_fits(c, inv, m, replace(req, moe_layers=layers)):
            layers -= 1
        if layers:
            hints.append(
                f"--moe-layers {layers} (benchmarks only: {layers} of "
                f"{plan.moe_layers_total} MoE layers)"
            )
        hints.append(f"{plan.total('host') / GIB:.0f} GiB of host memory")
    return "; or ".join(hints)


def _host_fits(c: M3TextConfig, inv: Inventory, m: Machine, req: PlanRequest) -> bool:
    p = make_plan(c, inv, m, req)
    return p.total("host") <= p.host_capacity
