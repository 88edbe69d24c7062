"""Settings -> Engine: one builder per backend, each importing its backend lazily so that a
missing optional dependency (torch, vllm) only matters when that backend is asked for; a running
`m3agent serve` of the same model is used instead when there is one (app/warm.py).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from m3agent.agent.events import Progress
from m3agent.engine.api import Engine, EngineName, EngineUnavailable
from m3agent.engine.model_source import resolve_model
from platformdirs import user_cache_dir

from .missing_extra import needs_line, package_installed
from .settings import Settings
from .warm import (
    attach,
    attach_to_server,
    load_progress,
    local_chat_files,
    local_serve,
    remote_api_key,
    running_server,
    server_engine,
    user_model_dirs,
    wants_server,
)

if TYPE_CHECKING:
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.offload.config import OffloadConfig

DEFAULT_REMOTE_MODEL = "MiniMaxAI/MiniMax-M3"
# progress(event): Progress events of the snapshot, the model load and the background server.
Report = Callable[[Progress], None]


class _Backend(Protocol):
    """A backend's engine class, as _import_backend finds it: its engine from a checkpoint."""

    def from_model_dir(self, path: Path, *args: Any, **options: Any) -> Engine: ...


def _import_backend(module: str, cls: str, engine: str) -> _Backend:
    try:
        mod = importlib.import_module(f"m3agent.engine.backends.{module}")
    except ImportError as e:
        from .missing_extra import missing_extra

        hint = missing_extra(e) or str(e)
        raise EngineUnavailable(
            f"the {engine} engine is unavailable in this install: {hint}"
        ) from e
    try:
        backend: _Backend = getattr(mod, cls)
    except AttributeError as e:
        raise EngineUnavailable(
            f"the {engine} engine is unavailable: no {cls} in {mod.__name__}"
        ) from e
    return backend


# The optional package each backend imports first (app/missing_extra.py names its install).
_BACKEND_PACKAGE = {EngineName.NATIVE: "torch", EngineName.VLLM: "vllm"}


def missing_backend(settings: Settings) -> str | None:
    """The one-line reason this install cannot run settings.engine, found without importing
    anything heavy, else None. Checked before the sandbox and the snapshot, so that a
    torch-less install says what to install first. A running `m3agent serve` of the model
    needs nothing here: the run attaches to it."""
    package = _BACKEND_PACKAGE.get(settings.engine)
    if package is None or package_installed(package):
        return None

    if running_server(settings) is not None:
        return None
    return f"the {settings.engine} engine is unavailable in this install: {needs_line(package)}"


def _scripted(settings: Settings, script: Path | None, progress: Report | None = None) -> Engine:
    from m3agent.engine.backends.scripted import ScriptedEngine

    if script is None:
        raise ValueError("--engine scripted needs --script FILE (a JSON array of strings)")
    return ScriptedEngine.from_file(script)


def _remote(settings: Settings, script: Path | None, progress: Report | None = None) -> Engine:
    from m3agent.engine.backends.remote import RemoteEngine

    # Our own `m3agent serve` at that URL: attached as run does to the server it starts (its
    # token, its model name and context, the checkpoint's tokenizer), unless --model differs.
    lock = local_serve(settings.home, settings.base_url)
    if lock is not None and settings.model in (None, lock.served_model_name):
        if (engine := attach(settings, lock)) is not None:
            return engine
    return RemoteEngine(
        settings.base_url,
        settings.model or DEFAULT_REMOTE_MODEL,
        api_key=remote_api_key(settings),
        timeout=settings.request_timeout_s,
        retries=settings.retries,
        **local_chat_files(settings.model),
    )


def _model_dir(settings: Settings, engine: str) -> Path:
    if not settings.model:
        raise ValueError(f"--engine {engine} needs --model DIR (a model checkpoint directory)")

    # A local directory or a hub repo id; a wrong or incomplete checkpoint is named here.
    return resolve_model(settings.model, model_dirs=user_model_dirs(settings)).path


def _native(settings: Settings, script: Path | None, progress: Report | None = None) -> Engine:
    model_dir = _model_dir(settings, "native")
    engine_cls = _import_backend("native", "NativeEngine", "native")
    device = settings.device
    if device is None:
        import torch  # present whenever the native backend imported

        device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = settings.dtype or ("bfloat16" if device.startswith("cuda") else "float32")
    offload = _offload(settings, model_dir, device)
    config = _engine_config(settings, device)
    loading = None if progress is None else lambda n, total: progress(load_progress(n, total))
    engine = engine_cls.from_model_dir(
        model_dir, device=device, dtype=dtype, config=config, progress=loading, offload=offload
    )
    tier_line = getattr(engine, "host_tier_reason", None)  # NativeEngine's
    if tier_line and (device.startswith("cuda") or settings.kv_host_tier != "auto"):
        print(f"native: {tier_line}", file=sys.stderr)
    return engine


# The kv_host_tier setting as EngineConfig.kv_host_tier (None: the engine decides).
HOST_TIER_MODES: dict[str, bool | None] = {"auto": None, "on": True, "off": False}


def _engine_config(settings: Settings, device: str) -> EngineConfig:
    """The native engine's configuration for the chat backends on `device`, with the user's
    host-memory and disk tiers (docs/kv-cache.md)."""
    from m3agent.engine.native.core.engine_config import serving_config

    tier = HOST_TIER_MODES[settings.kv_host_tier]
    config = serving_config(device, settings.gpu_memory_utilization, tier)
    if settings.kv_cache_bytes <= 0:
        return config
    return replace(
        config, kv_disk_dir=str(settings.kv_cache_dir), kv_disk_bytes=settings.kv_cache_bytes
    )


def _offload(settings: Settings, model_dir: Path, device: str) -> OffloadConfig | None:
    """The plan's expert offload for this run (None: all on the device); says why on stderr."""
    from m3agent.engine.offload.choose import choose_offload

    choice = choose_offload(
        model_dir,
        device,
        settings.offload_experts,
        settings.expert_form,
        settings.hot_experts,
        settings.prefill_stream_tokens,
        cache_dir=expert_cache_dir(),
    )
    if choice.config is not None:
        print(f"native: {choice.reason}", file=sys.stderr)
    return choice.config


def _vllm(settings: Settings, script: Path | None, progress: Report | None = None) -> Engine:
    model_dir = _model_dir(settings, "vllm")
    # Default M3 arguments (SPEC §6.2); `m3agent serve --engine vllm` exposes the options.
    return _import_backend("vllm", "VllmEngine", "vllm").from_model_dir(model_dir)


ENGINE_BUILDERS: dict[EngineName, Callable[[Settings, Path | None, Report | None], Engine]] = {
    EngineName.SCRIPTED: _scripted,
    EngineName.REMOTE: _remote,
    EngineName.NATIVE: _native,
    EngineName.VLLM: _vllm,
}


def build_engine(
    settings: Settings,
    *,
    script: Path | None = None,
    attach: bool = True,
    start_server: bool = False,
    progress: Report | None = None,
) -> Engine:
    """ValueError for a usage mistake; EngineUnavailable when the backend cannot be had.

    attach: use a running `m3agent serve` of the same model instead of loading it again.
    start_server: for native/vllm with `warm` on (the default), start that server when none
    runs (app/warm.py) so that the prefix cache outlives this process; run and the TUI ask
    for it, tests and `serve` itself do not. progress: Progress events while it loads."""
    builder = ENGINE_BUILDERS[settings.engine]  # Settings holds only EngineName members
    if attach:
        if start_server and wants_server(settings):
            return server_engine(settings, progress)
        if (server := attach_to_server(settings, progress)) is not None:
            return server
    return builder(settings, script, progress)


def expert_cache_dir() -> Path:
    """Where the native engine keeps converted routed experts (`<user cache>/m3agent/experts`)."""
    return Path(user_cache_dir("m3agent")) / "experts"
