"""`m3agent doctor`'s engine rows: can the configured engine run here?

torch and CUDA (with each GPU's memory), the model directory (a checkpoint the native or vLLM
engine can load, and its weight bytes against the GPU memory), and for a remote engine whether
the server answers `GET /v1/models` and serves the model. Nothing is loaded; every check is
bounded in time, and a failure is one line naming what to do.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.engine.api import EngineUnavailable
from m3agent.engine.model_source import resolve_model
from m3agent.engine.offload.hardware import meminfo_available, probe

if TYPE_CHECKING:
    from .settings import Settings

GIB = 1 << 30


@dataclass(frozen=True, slots=True)
class EngineRow:
    name: str  # "torch", "model", "server", "engine"
    ok: bool
    detail: str


def _torch() -> tuple[EngineRow, list[int]]:
    try:
        import torch
    except ImportError:
        return EngineRow("torch", False, "not installed (pip install -e '.[native]')"), []
    if not torch.cuda.is_available():
        return EngineRow("torch", True, f"{torch.__version__}, no CUDA GPU (the CPU runs it)"), []
    mems = [
        torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count())
    ]
    gpus = ", ".join(
        f"{torch.cuda.get_device_name(i)} {m / GIB:.0f} GiB" for i, m in enumerate(mems)
    )
    return EngineRow("torch", True, f"{torch.__version__}, CUDA {torch.version.cuda}: {gpus}"), mems


def _model(
    spec: str | None, gpu_mems: list[int], engine: str, settings: Settings | None = None
) -> list[EngineRow]:
    row = _model_row(spec, gpu_mems, engine, settings)
    if not spec or not row.ok or engine != "native" or settings is None:
        return [row]

    placed = placement_row(resolve_model(spec, local_only=True).path, gpu_mems, settings)
    if placed is None:
        return [row]
    if not placed.ok or "more than the GPU" not in row.detail:
        return [row, placed]
    # an M3 larger than the GPU is what expert offload is for: the plan decides
    return [EngineRow("model", True, row.detail.split(", more than")[0]), placed]


def placement_row(path: Path, gpu_mems: list[int], settings: Settings) -> EngineRow | None:
    """Can this machine run this M3, and with which expert form (the offload plan)? None for
    other checkpoints. Reads headers and /proc/meminfo only; no bandwidth is measured."""
    from m3agent.engine.offload.config import HOST_FORMS
    from m3agent.engine.offload.fit_hints import what_would_fit
    from m3agent.engine.offload.inventory import from_checkpoint
    from m3agent.engine.offload.plan import ExpertForm, PlanRequest, make_plan

    try:
        cfg, inv = from_checkpoint(path)
    except (ValueError, KeyError, OSError):
        return None
    total = inv.total
    if not gpu_mems:
        host = meminfo_available()
        ok = total <= host
        return EngineRow(
            "offload",
            ok,
            f"no GPU: all {total / GIB:.1f} GiB of weights in host memory on the CPU"
            + ("" if ok else f", more than the {host / GIB:.0f} GiB available"),
        )
    if total <= 0.9 * max(gpu_mems) and settings.offload_experts != "on":
        return EngineRow("offload", True, "the weights fit the GPU: no expert offload")
    form = ExpertForm(settings.expert_form)
    m = probe(gpu_mem_gib=max(gpu_mems) / GIB, gpu_bw_gbs=1000.0, host_bw_gbs=50.0)
    # plan what run and serve do: the KV host tier as the kv_host_tier setting says
    from .engine_build import HOST_TIER_MODES

    req = PlanRequest(
        expert_form=form if form in HOST_FORMS else ExpertForm.AUTO,
        kv_host_tier=HOST_TIER_MODES[settings.kv_host_tier],
        hot_experts=bool(settings.hot_experts),
    )
    plan = make_plan(cfg, inv, m, req)
    why = "forced" if settings.kv_host_tier == "on" else "the KV cache does not fit the GPU"
    tier = f"; KV host tier on ({why}): the MSA layers' K/V pages in host memory"
    tier = tier if plan.kv_host_tier else ""
    where = (
        f"GPU {plan.total('gpu') / GIB:.0f} of {plan.gpu_capacity / GIB:.0f} GiB, host "
        f"{plan.total('host') / GIB:.0f} of {plan.host_capacity / GIB:.0f} GiB"
    )
    if plan.fits:
        return EngineRow(
            "offload",
            True,
            f"runs with the routed experts in host memory as {plan.expert_form} ({where}, "
            f"{plan.hot_per_layer} hot experts per layer on the GPU): --expert-form "
            f"{plan.expert_form}{tier}",
        )
    return EngineRow(
        "offload",
        False,
        f"cannot run here at 128K context ({where}); would fit: {what_would_fit(cfg, inv, m, req)}",
    )


def _model_row(
    spec: str | None, gpu_mems: list[int], engine: str, settings: Settings | None
) -> EngineRow:
    if not spec:
        return EngineRow("model", False, f"--engine {engine} needs --model DIR")
    try:
        path = resolve_model(spec, local_only=True).path
    except (ValueError, EngineUnavailable) as e:
        return EngineRow("model", False, str(e))
    weights = (
        sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))
        if path.is_dir()
        else path.stat().st_size
    )
    size = f"{weights / GIB:.1f} GiB" if weights >= GIB else f"{weights / (1 << 20):.1f} MiB"
    detail = f"{path}: {size} of weights"
    if gpu_mems and engine == "native" and weights > max(gpu_mems):
        return EngineRow(
            "model",
            False,
            f"{detail}, more than the GPU's {max(gpu_mems) / GIB:.0f} GiB "
            "(m3agent model plan DIR says what fits)",
        )
    if gpu_mems and engine == "vllm" and weights > sum(gpu_mems):
        return EngineRow(
            "model", False, f"{detail}, more than all GPUs together ({sum(gpu_mems) / GIB:.0f} GiB)"
        )
    return EngineRow("model", True, detail)


def _server(base_url: str, model: str | None, timeout_s: float) -> EngineRow:
    import httpx

    url = base_url.rstrip("/") + "/models"
    try:
        r = httpx.get(url, timeout=timeout_s)
    except httpx.HTTPError as e:
        return EngineRow(
            "server", False, f"{url}: {type(e).__name__}: {e} (is the server running?)"
        )
    if r.status_code != 200:
        return EngineRow("server", False, f"{url}: HTTP {r.status_code}")
    try:
        ids = [m["id"] for m in r.json().get("data", [])]
    except (ValueError, AttributeError, KeyError, TypeError):
        return EngineRow("server", False, f"{url}: not an OpenAI model list")
    if model and model not in ids:
        return EngineRow(
            "server", False, f"{url}: serves {', '.join(ids) or 'nothing'}, not {model}"
        )
    return EngineRow("server", True, f"{url}: {', '.join(ids)}")


def check_engine(settings: Settings, timeout_s: float = 3.0) -> list[EngineRow]:
    engine = settings.engine
    rows = [EngineRow("engine", True, engine)]
    if engine == "scripted":
        return rows
    if engine == "remote":
        return [*rows, _server(settings.base_url, settings.model, timeout_s)]
    torch_row, mems = _torch()
    rows.append(torch_row)
    if engine == "vllm":
        # Found, not imported: only the vLLM backend module imports vllm.
        found = importlib.util.find_spec("vllm") is not None
        detail = "installed" if found else "not installed (pip install -e '.[native,vllm]')"
        rows.append(EngineRow("vllm", found, detail))
    return [*rows, *_model(settings.model, mems, engine, settings)]


def format_rows(rows: list[EngineRow]) -> str:
    return "\n".join(f"  {'ok  ' if r.ok else 'FAIL'}  {r.name:<8} {r.detail}" for r in rows)


def rows_json(rows: list[EngineRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
