"""`m3agent model plan DIR`: where the full M3 would live on one GPU with its experts in RAM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from m3agent.engine.offload.hardware import probe

from ..cli_errors import die
from ..exit_codes import INTERNAL_ERROR
from . import flags

if TYPE_CHECKING:
    from m3agent.engine.m3.config import M3TextConfig
    from m3agent.engine.offload.inventory import Inventory
    from m3agent.engine.offload.plan import Plan


def machine_given(gpu_mem: float | None, host_mem: float | None) -> bool:
    """A plan for another machine (its memory given): no advice about this one."""
    return gpu_mem is not None or host_mem is not None


_TIER_MODES: dict[str, bool | None] = {"auto": None, "on": True, "off": False}


def register_plan(model_app: typer.Typer) -> None:
    model_app.command("plan")(plan)


def plan(
    path: Path = typer.Argument(
        ...,
        help="Checkpoint directory (config.json; safetensors "
        "headers when present, else sizes from the config).",
    ),
    context: int = typer.Option(131072, "--context", help="Tokens of context per sequence."),
    max_seqs: int = typer.Option(1, "--max-seqs", help="Sequences held in the KV cache."),
    kv_cache_dtype: str = typer.Option("fp8", "--kv-cache-dtype", help="fp8 or bf16."),
    expert_form: str = typer.Option(
        "auto",
        "--expert-form",
        help="Routed experts in host memory as: auto, stored, int8 or bf16.",
    ),
    weights: str = typer.Option(
        "",
        "--weights",
        help="Without safetensors: assume bf16, fp8 or mxfp8 storage "
        "(default: the config's quantization_config).",
    ),
    gpu_mem: float = typer.Option(None, "--gpu-mem", help="GPU memory in GiB (default: probed)."),
    gpu_bw: float = typer.Option(None, "--gpu-bw", help="GPU read bandwidth in GB/s."),
    host_mem: float = typer.Option(
        None, "--host-mem", help="Host memory to use in GiB (default: MemAvailable)."
    ),
    host_bw: float = typer.Option(
        None, "--host-bw", help="Host read bandwidth in GB/s (default: measured, ~1 s)."
    ),
    pcie: float = typer.Option(None, "--pcie-bw", help="Pinned host-to-GPU GB/s (default 55)."),
    moe_layers: int = typer.Option(
        None,
        "--moe-layers",
        help="Experts of only the first N MoE layers (benchmark checkpoints).",
    ),
    hot: bool = typer.Option(
        False,
        "--hot-experts/--no-hot-experts",
        help="Plan a GPU cache of hot experts in the memory left (run uses one only when the "
        "hot_experts setting is given).",
    ),
    stream_experts: int = typer.Option(
        32,
        "--stream-experts",
        help="Experts per streamed prefill transfer (two such buffers on the GPU).",
    ),
    kv_host_tier: str = typer.Option(
        "auto",
        "--kv-host-tier",
        help="auto (when the KV does not fit the GPU), on or off: MSA K/V in host memory.",
    ),
    as_json: flags.Json = False,
) -> None:
    """Plan GPU and host placement for the full M3 with the routed experts in RAM.

    Exit 0 when the plan fits, 2 on bad input or when it does not fit (with what would).
    """
    from m3agent.engine.offload.fit_hints import what_would_fit
    from m3agent.engine.offload.plan import ExpertForm, PlanRequest, make_plan
    from m3agent.engine.offload.report import plan_dict, plan_text

    if kv_host_tier not in _TIER_MODES:
        die(f"--kv-host-tier must be auto, on or off, got {kv_host_tier!r}")
    try:
        cfg, inv = _inventory(path, weights)
        req = PlanRequest(
            context_len=context,
            max_seqs=max_seqs,
            kv_cache_dtype=kv_cache_dtype,
            expert_form=ExpertForm(expert_form),
            hot_experts=hot,
            moe_layers=moe_layers,
            stream_experts=stream_experts,
            kv_host_tier=_TIER_MODES[kv_host_tier],
        )
        machine = probe(
            gpu_mem_gib=gpu_mem,
            gpu_bw_gbs=gpu_bw,
            host_mem_gib=host_mem,
            host_bw_gbs=host_bw,
            pcie_gbs=pcie,
        )
        result = make_plan(cfg, inv, machine, req)
    except ValueError as e:
        die(str(e))
    except OSError as e:
        die(str(e), INTERNAL_ERROR)
    if as_json:
        typer.echo(json.dumps(plan_dict(result, inv, machine)))
    else:
        typer.echo(plan_text(result, inv, machine))
        if result.fits and not machine_given(gpu_mem, host_mem):
            typer.echo(_how_to_run(path, result))
    if not result.fits:
        die(f"the plan does not fit; would fit: {what_would_fit(cfg, inv, machine, req)}")


def _inventory(path: Path, weights: str) -> tuple[M3TextConfig, Inventory]:
    """The checkpoint's config and its bytes per part: from its safetensors headers, or for a
    config-only directory from the config (in the --weights storage format when given)."""
    from m3agent.engine.offload.inventory import StorageFormat, from_checkpoint, from_config

    cfg, inv = from_checkpoint(path)
    if weights:
        if inv.source == "safetensors":
            die("--weights is for config-only directories; this one has safetensors")
        inv = from_config(cfg, StorageFormat(weights))
    return cfg, inv


def _how_to_run(path: Path, result: Plan) -> str:
    """The command that runs a plan that fits on this machine."""
    return (
        f"this machine runs it: m3agent run --engine native --model {path} "
        f"--expert-form {result.expert_form} (expert offload is automatic when the "
        "weights exceed the GPU; --offload-experts on forces it"
        + (
            "; so is the KV host tier when the KV cache does not fit: kv_host_tier = auto)"
            if result.kv_host_tier
            else ")"
        )
    )
