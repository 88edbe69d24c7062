"""`m3agent serve`: keep one engine warm behind an OpenAI-compatible endpoint.

`m3agent run` and the TUI attach to it automatically when they are asked for the same model
(`--engine native|vllm --model M`); `--status` lists running servers, `--stop` ends one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from m3agent.engine.api import LOCAL_ENGINES, EngineError, EngineUnavailable
from m3agent.engine.model_source import resolve_model

from .. import exit_codes
from ..serve.detach import start_detached
from ..serve.lock import all_locks, lock_path
from ..serve.process import stop_process
from ..settings import load_settings
from . import flags

if TYPE_CHECKING:
    from collections.abc import Callable

    from m3agent.engine.api import Engine

    from ..engine_build import Report
    from ..settings import Settings


# serve's flags, one Annotated type each (as flags.py declares the shared ones), so serve()'s
# signature reads as the command line. --allow-media-dir keeps its default in typer.Option: a
# [] in the signature would be one list shared by every call.
BackendFlag = Annotated[str, typer.Option("--engine", help="Backend: native|vllm.")]
ModelFlag = Annotated[
    str | None,
    typer.Option("--model", help="Checkpoint directory or hub repo id (MiniMaxAI/MiniMax-M3)."),
]
Port = Annotated[int | None, typer.Option("--port", help="TCP port (default: a free one).")]
Socket = Annotated[Path | None, typer.Option("--socket", help="Listen on a unix socket.")]
Host = Annotated[str, typer.Option("--host", help="Address to listen on.")]
AllowPublic = Annotated[
    bool,
    typer.Option(
        "--allow-public",
        help="Allow a non-loopback --host (the token then travels in clear text).",
    ),
]
MaxMediaMb = Annotated[
    int, typer.Option("--max-media-mb", help="Media (data URLs) a request may carry, in MB.")
]
ServedModelName = Annotated[
    str | None,
    typer.Option("--served-model-name", help="Model name clients use (default: from --model)."),
]
Status = Annotated[bool, typer.Option("--status", help="List running servers and exit.")]
Detach = Annotated[
    bool,
    typer.Option("--detach", help="Run in the background; return once the model is loaded."),
]
Stop = Annotated[
    bool,
    typer.Option("--stop", help="Stop the server of --model (all servers without --model)."),
]
GpuMemoryUtilization = Annotated[
    float | None,
    typer.Option(
        "--gpu-memory-utilization",
        help="Most of each GPU's free memory to use (default: the config's, 0.9); native "
        "takes only what its KV cache needs below it.",
    ),
]
IdleTimeout = Annotated[
    float | None,
    typer.Option(
        "--idle-timeout",
        metavar="S",
        help="Stop after S seconds without a request (run and the TUI start theirs with "
        "the config's server_idle_timeout_s).",
    ),
]
# vLLM's own
TensorParallelSize = Annotated[
    int | None,
    typer.Option("--tensor-parallel-size", help="vllm: GPUs per model (default: chosen)."),
]
MaxModelLen = Annotated[
    int | None,
    typer.Option("--max-model-len", help="vllm: context length (default 262144, capped)."),
]
KvCacheDtype = Annotated[str, typer.Option("--kv-cache-dtype", help="vllm: auto|fp8.")]
SpeculativeDraft = Annotated[
    str | None,
    typer.Option(
        "--speculative-draft",
        help="vllm: EAGLE3 draft (e.g. Inferact/MiniMax-M3-EAGLE3).",
    ),
]
MaxImages = Annotated[int, typer.Option("--max-images", help="vllm: images per request.")]
MaxVideos = Annotated[int, typer.Option("--max-videos", help="vllm: videos per request.")]
Verbose = Annotated[
    bool,
    typer.Option("--verbose", help="vllm: log throughput and KV cache stats periodically."),
]
KvConnector = Annotated[
    str | None,
    typer.Option(
        "--kv-connector",
        help="vllm: KV beyond the GPU through vLLM's connector: lmcache (needs the "
        "lmcache package; docs/kv-cache.md).",
    ),
]
KvOffloadCpuGb = Annotated[
    float,
    typer.Option("--kv-offload-cpu-gb", help="vllm --kv-connector: CPU memory for KV (GB)."),
]
KvOffloadDir = Annotated[
    str | None,
    typer.Option("--kv-offload-dir", help="vllm --kv-connector: a disk folder for KV."),
]
KvOffloadDiskGb = Annotated[
    float,
    typer.Option("--kv-offload-disk-gb", help="vllm --kv-connector: its size on disk (GB)."),
]


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    engine: BackendFlag = "native",
    model: ModelFlag = None,
    port: Port = None,
    socket: Socket = None,
    host: Host = "127.0.0.1",
    allow_public: AllowPublic = False,
    allow_media_dir: list[Path] = typer.Option(
        [],
        "--allow-media-dir",
        help="A directory whose files clients may name as file:// image/video URLs "
        "(repeatable; default none: media only as data: URLs).",
    ),
    max_media_mb: MaxMediaMb = 32,
    served_model_name: ServedModelName = None,
    status: Status = False,
    detach: Detach = False,
    stop: Stop = False,
    tensor_parallel_size: TensorParallelSize = None,
    max_model_len: MaxModelLen = None,
    kv_cache_dtype: KvCacheDtype = "auto",
    speculative_draft: SpeculativeDraft = None,
    max_images: MaxImages = 16,
    max_videos: MaxVideos = 4,
    gpu_memory_utilization: GpuMemoryUtilization = None,
    verbose: Verbose = False,
    kv_connector: KvConnector = None,
    kv_offload_cpu_gb: KvOffloadCpuGb = 16.0,
    kv_offload_dir: KvOffloadDir = None,
    kv_offload_disk_gb: KvOffloadDiskGb = 32.0,
    offload_experts: flags.OffloadExperts = None,
    expert_form: flags.ExpertForm = None,
    kv_host_tier: flags.KvHostTier = None,
    idle_timeout: IdleTimeout = None,
) -> None:
    """Serve one model over HTTP until stopped."""
    vllm_options = {
        "tensor_parallel_size": tensor_parallel_size,
        "max_model_len": max_model_len,
        "kv_cache_dtype": kv_cache_dtype,
        "speculative_draft": speculative_draft,
        "max_images": max_images,
        "max_videos": max_videos,
        "gpu_memory_utilization": gpu_memory_utilization,
        "verbose": verbose,
        "kv_connector": kv_connector,
        "kv_offload_cpu_gb": kv_offload_cpu_gb,
        "kv_offload_disk_dir": kv_offload_dir,
        "kv_offload_disk_gb": kv_offload_disk_gb,
    }
    if detach:
        # the same command line, in the background (serve/detach.py)
        argv = [a for a in sys.argv[1:] if a != "--detach"]
        raise typer.Exit(_detach(argv, engine, model))
    raise typer.Exit(
        execute(
            engine=engine,
            model=model,
            port=port,
            socket=socket,
            host=host,
            served_model_name=served_model_name,
            status=status,
            stop=stop,
            vllm_options=vllm_options,
            allow_public=allow_public,
            allow_media_dir=tuple(allow_media_dir),
            max_media_mb=max_media_mb,
            offload={
                "offload_experts": offload_experts,
                "expert_form": expert_form,
                "kv_host_tier": kv_host_tier,
                "gpu_memory_utilization": gpu_memory_utilization,
            },
            idle_timeout_s=idle_timeout,
        )
    )


def _fail(code: int, message: str) -> int:
    typer.echo(f"error: {message}", err=True)
    return code


def _status(home: Path, key: str | None) -> int:
    found = [lk for lk in all_locks(home) if key is None or lk.model == key]
    if not found:
        typer.echo("no m3agent server is running")
        return exit_codes.ENGINE_UNAVAILABLE
    for lk in found:
        typer.echo(
            f"pid {lk.pid}  {lk.state:<7}  {lk.backend:<6}  {lk.address}  "
            f"{lk.served_model_name}  ({lk.model})"
        )
    return exit_codes.OK


def _stop(home: Path, key: str | None) -> int:
    found = [lk for lk in all_locks(home) if key is None or lk.model == key]
    if not found:
        typer.echo("no m3agent server is running")
        return exit_codes.OK
    code = exit_codes.OK
    for lk in found:
        if stop_process(lk.pid):
            lock_path(home, lk.model).unlink(missing_ok=True)
            typer.echo(f"stopped pid {lk.pid} ({lk.served_model_name})")
        else:
            code = _fail(exit_codes.INTERNAL_ERROR, f"pid {lk.pid} did not stop")
    return code


def _detach(argv: list[str], engine: str, model: str | None) -> int:
    if not model:
        return _fail(exit_codes.USAGE_ERROR, "serve needs --model DIR or a hub repo id")
    try:
        settings = load_settings()
        from ..warm import user_model_dirs

        # Downloads here, in the foreground, with progress.
        key = resolve_model(model, model_dirs=user_model_dirs(settings)).key
    except ValueError as e:
        return _fail(exit_codes.USAGE_ERROR, str(e))
    except EngineUnavailable as e:
        return _fail(exit_codes.ENGINE_UNAVAILABLE, str(e))
    lock, log, tail = start_detached(argv, settings.home, key)
    if lock is None:
        return _fail(
            exit_codes.ENGINE_UNAVAILABLE,
            f"the server did not start (log: {log}): {tail.splitlines()[-1] if tail else '?'}",
        )
    typer.echo(
        f"serving {lock.served_model_name} ({lock.backend}) on {lock.address} "
        f"(pid {lock.pid}, log {log})"
    )
    return exit_codes.OK


def _vllm_builder(options: dict[str, Any]) -> Callable[..., Engine]:
    """The vLLM engine with serve's options (ValueError for a bad one, before any load)."""
    from m3agent.engine.backends.vllm_args import VllmOptions

    opts = VllmOptions(**options)

    def build(settings: Settings, attach: bool = False, progress: Report | None = None) -> Engine:
        from m3agent.engine.backends.vllm import VllmEngine

        assert settings.model is not None  # run_server passes the resolved model directory
        engine = VllmEngine.from_model_dir(settings.model, opts)
        for note in engine.plan.notes:
            typer.echo(f"vllm: {note}", err=True)
        return engine

    return build


def execute(
    *,
    engine: str,
    model: str | None,
    port: int | None,
    socket: Path | None,
    host: str,
    served_model_name: str | None,
    status: bool,
    stop: bool,
    vllm_options: dict[str, Any] | None = None,
    allow_public: bool = False,
    allow_media_dir: tuple[Path, ...] = (),
    max_media_mb: int = 32,
    offload: dict[str, Any] | None = None,
    idle_timeout_s: float | None = None,
) -> int:
    from ..engine_build import build_engine
    from ..serve.run import run_server

    try:
        settings = load_settings()
        if engine not in LOCAL_ENGINES:
            raise ValueError(f"--engine must be native or vllm, got {engine!r}")
        if idle_timeout_s is not None and idle_timeout_s <= 0:
            raise ValueError(f"--idle-timeout must be positive, got {idle_timeout_s:g}")
        if port is not None and socket is not None:
            raise ValueError("give --port or --socket, not both")
        if port is not None and not 0 <= port < 65536:
            raise ValueError(f"--port {port} is not a TCP port")
        if not 0 <= max_media_mb <= 512:
            raise ValueError(f"--max-media-mb must be 0..512, got {max_media_mb}")
        settings = settings.override(engine=engine, model=model, **(offload or {}))
        vllm_opts = {
            **(vllm_options or {}),
            "gpu_memory_utilization": settings.gpu_memory_utilization,
        }
        builder = _vllm_builder(vllm_opts) if engine == "vllm" else build_engine
    except ValueError as e:
        return _fail(exit_codes.USAGE_ERROR, str(e))
    if status or stop:
        key = None
        if model:
            try:
                from ..warm import user_model_dirs

                key = resolve_model(
                    model, local_only=True, check=False, model_dirs=user_model_dirs(settings)
                ).key
            except (ValueError, EngineUnavailable):
                key = str(Path(model).expanduser().resolve())
        return _status(settings.home, key) if status else _stop(settings.home, key)
    if not settings.model:
        return _fail(exit_codes.USAGE_ERROR, "serve needs --model DIR or a hub repo id")
    try:
        run_server(
            settings,
            host=host,
            port=port,
            socket_path=str(socket.expanduser().resolve()) if socket else None,
            served_model_name=served_model_name,
            build_engine=builder,
            allow_public=allow_public,
            allowed_media=tuple(d.expanduser() for d in allow_media_dir),
            media_bytes=max_media_mb * 1024 * 1024,
            idle_timeout_s=idle_timeout_s,
        )
    except ValueError as e:
        return _fail(exit_codes.USAGE_ERROR, str(e))
    except EngineUnavailable as e:
        return _fail(exit_codes.ENGINE_UNAVAILABLE, str(e))
    except EngineError as e:
        return _fail(exit_codes.INTERNAL_ERROR, str(e))
    except OSError as e:  # the port is taken, the socket path is not writable
        return _fail(exit_codes.USAGE_ERROR, f"cannot listen: {e.strerror or e}")
    return exit_codes.OK
