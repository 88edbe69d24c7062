"""Whether a native M3 run offloads its routed experts, and how: from the plan.

`auto` offloads when the checkpoint's weights do not fit the GPU (a CPU-only run never needs
it: everything is in host memory already); `on` forces it (any device: on a CPU the "GPU" half
runs on the CPU too, which is how the tests exercise the path); `off` never. The expert form
is the plan's choice unless given; no hot-expert slots unless given (the plan's figure is what
the GPU has room for, but hot experts were measured to slow decode today: see below).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .config import HOST_FORMS, OffloadConfig
from .plan import ExpertForm

MODES = ("auto", "on", "off")
GPU_FIT_SHARE = 0.9  # weights above this share of the GPU leave no room for KV and activations


@dataclass(frozen=True, slots=True)
class OffloadChoice:
    config: OffloadConfig | None
    reason: str  # one line for the load log


def _is_m3(model_dir: Path) -> bool:
    import json

    try:
        cfg = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return str(cfg.get("model_type", "")).startswith("minimax_m3")


def choose_offload(
    model_dir: str | Path,
    device: str,
    mode: str = "auto",
    expert_form: str = "auto",
    hot_experts: int | None = None,
    prefill_stream_tokens: int = 1024,
    max_model_len: int | None = None,
    cache_dir: Path | None = None,
) -> OffloadChoice:
    if mode not in MODES:
        raise ValueError(f"offload mode must be one of {', '.join(MODES)}, got {mode!r}")
    try:
        form_req = ExpertForm(expert_form)
    except ValueError:
        forms = ", ".join(f.value for f in (ExpertForm.AUTO, *HOST_FORMS))
        raise ValueError(f"unknown expert form {expert_form!r} (use {forms})") from None
    p = Path(model_dir)
    if mode == "off":
        return OffloadChoice(None, "expert offload off")
    if not _is_m3(p):
        if mode == "on":
            raise ValueError("--offload-experts is for MiniMax M3 checkpoints")
        return OffloadChoice(None, "not an M3 checkpoint: no experts to offload")
    from .inventory import from_checkpoint

    cfg, inv = from_checkpoint(p)
    cuda = device.startswith("cuda")
    plan = None
    if cuda:
        from .hardware import probe
        from .plan import PlanRequest, make_plan

        # placement needs no bandwidth figures: give them rather than measure (a second) or
        # refuse a GPU whose bandwidth the planner does not know
        machine = probe(gpu_bw_gbs=1000.0, host_bw_gbs=50.0)
        req = PlanRequest(
            context_len=max(128, min(max_model_len or 131072, cfg.max_model_len)),
            expert_form=form_req if form_req in HOST_FORMS else ExpertForm.AUTO,
        )
        plan = make_plan(cfg, inv, machine, req)
        if mode == "auto" and inv.total <= GPU_FIT_SHARE * machine.gpu_bytes:
            return OffloadChoice(None, "the weights fit the GPU: no expert offload")
    elif mode == "auto":
        return OffloadChoice(None, "no GPU: the whole model runs from host memory")
    form = form_req
    if form is ExpertForm.AUTO:
        form = plan.expert_form if plan is not None else ExpertForm.INT8
        if form not in HOST_FORMS:
            form = ExpertForm.INT8
    # No hot experts unless asked: on the H200 run of 2026-12-01 the GPU's hot experts, which
    # dequantise their tiled host form on every call, made decode slower than leaving every
    # routed expert to the CPU (int8 b1 62.1 -> 62.9 ms, int4 47.8 -> 67.2 ms; docs/offload.md).
    hot = hot_experts if hot_experts is not None else 0
    oc = OffloadConfig(
        form=form,
        hot_experts_per_layer=hot,
        prefill_stream_tokens=prefill_stream_tokens,
        cache_dir=cache_dir,
    )
    why = "forced" if mode == "on" else f"{inv.total / 2**30:.0f} GiB of weights exceed the GPU"
    note = "; decode runs eagerly (no CUDA graphs around the CPU step yet)" if cuda else ""
    return OffloadChoice(
        oc, f"expert offload ({why}): routed experts as {form} in host memory{note}"
    )
