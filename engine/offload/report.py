"""A placement plan as the text `m3agent model plan` prints, or as a JSON-ready dict."""

from __future__ import annotations

from typing import Any

from .hardware import GIB, Machine
from .inventory import Inventory
from .plan import Plan


def _gib(n: float) -> str:
    return f"{n / GIB:8.2f} GiB"


def plan_dict(plan: Plan, inv: Inventory, m: Machine) -> dict[str, Any]:
    return {
        "fits": plan.fits,
        "checkpoint_format": str(inv.fmt),
        "inventory_source": inv.source,
        "expert_form": str(plan.expert_form),
        "hot_experts_per_layer": plan.hot_per_layer,
        "moe_layers_on_host": plan.moe_layers_on_host,
        "moe_layers_total": plan.moe_layers_total,
        "gpu": {
            "capacity": plan.gpu_capacity,
            "total": plan.total("gpu"),
            "rows": {r.label: r.nbytes for r in plan.rows if r.where == "gpu"},
        },
        "host": {
            "capacity": plan.host_capacity,
            "total": plan.total("host"),
            "rows": {r.label: r.nbytes for r in plan.rows if r.where == "host"},
        },
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "kv_host_tier": plan.kv_host_tier,
        "decode_bound": {
            "host_ms": plan.decode_host_s * 1e3,
            "gpu_ms": plan.decode_gpu_s * 1e3,
            "kv_fetch_ms": plan.decode_fetch_s * 1e3,
            "tokens_per_s": plan.tokens_per_s,
        },
        "prefill_stream_pass_s": plan.stream_pass_s,
        "ttft_1m_s": plan.ttft_1m_s,
        "machine": {
            "gpu": m.gpu_name,
            "gpu_read_bw": m.gpu_read_bw,
            "host_read_bw": m.host_read_bw,
            "pcie_bw": m.pcie_bw,
            "measured": list(m.measured),
        },
    }


def plan_text(plan: Plan, inv: Inventory, m: Machine) -> str:
    def meas(key: str) -> str:
        return " (measured)" if key in m.measured else ""

    lines = [
        f"checkpoint: {inv.fmt} weights ({inv.source}), {plan.moe_layers_total} MoE layers",
        f"machine:    {m.gpu_name} {m.gpu_bytes / GIB:.1f} GiB{meas('gpu_mem')}, "
        f"read {m.gpu_read_bw / 1e12:.2f} TB/s | host {m.host_bytes / GIB:.1f} GiB"
        f"{meas('host_mem')}, read {m.host_read_bw / 1e9:.0f} GB/s{meas('host_bw')} | "
        f"PCIe {m.pcie_bw / 1e9:.0f} GB/s",
    ]
    for where in ("gpu", "host"):
        lines.append(f"{where.upper()}:")
        for r in plan.rows:
            if r.where == where:
                lines.append(f"  {r.label:<52}{_gib(r.nbytes)}")
        cap = plan.gpu_capacity if where == "gpu" else plan.host_capacity
        lines.append(f"  {'total (of ' + f'{cap / GIB:.1f} GiB)':<52}{_gib(plan.total(where))}")
    gpu_s = plan.decode_gpu_s + plan.decode_fetch_s
    if plan.kv_host_tier:
        lines.append(
            "KV cache: host-memory tier (the whole KV does not fit the GPU, or it was asked "
            "for): MSA layers' K/V pages in pinned host memory, the selected blocks fetched "
            f"each step (<= {plan.decode_fetch_s * 1e3:.1f} ms per token over PCIe)"
        )
    lines.append(
        f"decode bound, batch 1: host experts {plan.decode_host_s * 1e3:.1f} ms + GPU "
        f"{gpu_s * 1e3:.1f} ms per token -> {plan.tokens_per_s:.1f} tokens/s "
        f"overlapped ({1 / (plan.decode_host_s + gpu_s):.1f} serial)"
    )
    prefill = f"prefill: one pass of every expert over PCIe {plan.stream_pass_s:.1f} s"
    if plan.ttft_1m_s is not None:
        prefill += f"; 1M-token prompt >= {plan.ttft_1m_s:.0f} s"
    lines.append(prefill)
    return "\n".join(lines)
