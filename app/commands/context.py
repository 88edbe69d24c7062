"""`m3agent context [--json] [--quiet] [--cwd DIR] [--budget N] [--engine E --model M --base-url U]`.

What the repository snapshot of a session started here would hold: files included (tokens
each), listed by path only (over budget; with their real size on disk), skipped (with the
reason), the total, the budget and the content hash. The budget is --budget, the
`context_budget` setting, or the session's real window minus `context_reserve`; the window is
what the session would get: a running `m3agent serve` of the model, the server's
`max_model_len` (remote), or the model's own maximum (native: capped by the CPU KV cache as
the native engine caps it). No model is loaded.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from m3agent.agent.context import build_snapshot
from m3agent.agent.context.guard import workspace_refusal
from m3agent.engine.m3.config import load_config

from ..cli_errors import die as fail
from ..progress_line import ProgressLine
from ..safe_text import SafeStream
from ..settings import load_settings
from . import flags

if TYPE_CHECKING:
    from m3agent.agent.context.snapshot import Snapshot
    from m3agent.engine.m3.config import M3TextConfig

    from ..settings import Settings

M3_CONTEXT_TOKENS = 1_048_576  # MiniMax M3's window when no model directory says otherwise
DEFAULT_SESSION_TOKENS = 196_608  # what remote/scripted sessions assume when not told


def _native_cpu_window(text_config: M3TextConfig, max_len: int) -> int:
    """The window LLMEngine gives a model on CPU: the default KV budget caps it."""
    from m3agent.engine.native.core.engine_config import DEFAULT_CPU_KV_BYTES

    c = text_config
    index = c.sparse_attention_config.sparse_index_dim
    per_token = sum(
        c.num_key_value_heads * 2 * c.head_dim + (index if c.is_sparse_layer(i) else 0)
        for i in range(c.num_hidden_layers)
    )
    blocks = DEFAULT_CPU_KV_BYTES // (per_token * 128 * 4)  # fp32 on CPU
    return max(0, min(max_len, (max(2, blocks) - 1) * 128))


def _server_max_model_len(settings: Settings) -> int | None:
    import httpx

    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    r = httpx.get(settings.base_url.rstrip("/") + "/models", headers=headers, timeout=10.0)
    r.raise_for_status()
    cards = r.json().get("data") or []
    wanted = [c for c in cards if c.get("id") == settings.model] or cards
    lens = [c.get("max_model_len") for c in wanted if isinstance(c.get("max_model_len"), int)]
    return lens[0] if lens else None


def session_window(settings: Settings) -> tuple[int, str]:
    """(tokens, where the figure comes from) for a session with these settings."""
    if settings.engine == "remote":
        try:
            n = _server_max_model_len(settings)
        except Exception as e:  # noqa: BLE001 (any failure: say so and assume the default)
            return DEFAULT_SESSION_TOKENS, f"default: {settings.base_url} did not answer ({e})"
        if n is None:
            return DEFAULT_SESSION_TOKENS, "default: the server names no max_model_len"
        return n, f"max_model_len of {settings.base_url}"
    if settings.engine == "scripted" or not settings.model:
        return DEFAULT_SESSION_TOKENS if settings.engine == "scripted" else M3_CONTEXT_TOKENS, (
            "default"
        )
    from ..warm import attach_to_server

    server = attach_to_server(settings)
    if server is not None:
        return server.info().max_context_tokens, "the running m3agent serve of this model"
    try:
        text = load_config(Path(settings.model).expanduser()).text_config
    except ValueError:
        return M3_CONTEXT_TOKENS, "M3's window (no readable config.json)"
    if settings.engine == "vllm":
        return min(262_144, text.max_model_len), "vLLM's default max_model_len for this model"
    device = settings.device or "cpu"
    if device == "cpu" and settings.device is None:
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            device = "cpu"
    if device == "cpu":
        return _native_cpu_window(text, text.max_model_len), "native engine on CPU (KV cache)"
    return text.max_model_len, "the model's maximum (the GPU KV cache may lower it)"


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def register(app: typer.Typer) -> None:
    app.command("context")(context)


def context(
    as_json: flags.JsonReport = False,
    cwd: Path = typer.Option(Path("."), "--cwd", help="Repository (default: here)."),
    budget: int | None = typer.Option(None, "--budget", help="Token budget of the snapshot."),
    files: bool = typer.Option(False, "--files", help="Text: list every file, not a summary."),
    # the session's engine, as `run` takes it: its tokenizer and context length
    engine: flags.Engine = None,
    model: flags.Model = None,
    base_url: flags.BaseUrl = None,
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="No progress on stderr while the snapshot is built."
    ),
    allow_home: flags.AllowHome = False,
) -> None:
    """Show what the repository snapshot of a session started here would hold."""
    root = _workspace_root(cwd, allow_home)
    if budget is not None and budget < 1:
        fail(f"--budget must be positive, got {budget}")
    try:
        settings = load_settings().override(engine=engine, model=model, base_url=base_url)
        window, window_source = session_window(settings)
        snap = _build_snapshot(settings, root, window, budget, quiet)
    except (ValueError, OSError) as e:  # OSError: a directory the walk may not read
        fail(str(e))
    sizes = _listed_sizes(root, snap)
    if as_json:
        _write_json(root, window, window_source, snap, sizes)
    else:
        _write_text(root, window, window_source, snap, sizes, every_file=files)


def _workspace_root(cwd: Path, allow_home: bool) -> Path:
    """The repository to snapshot; refused (exit 2) where `run` would refuse to start."""
    root = cwd.expanduser().resolve()
    if not root.is_dir():
        fail(f"{root} is not a directory")
    if not allow_home:  # as `run` refuses to start there (agent/context/guard.py)
        if (why := workspace_refusal(root)) is not None:
            fail(why)
    return root


def _build_snapshot(
    settings: Settings, root: Path, window: int, budget: int | None, quiet: bool
) -> Snapshot:
    """The snapshot a session would get, built with the session's tokenizer and budget."""
    from ..session_context import snapshot_config, snapshot_tokenizer

    config = snapshot_config(settings, window, budget)
    if config is None:
        fail("the context reserve leaves no room for a snapshot (lower context_reserve)")
    tokenizer = snapshot_tokenizer(settings)
    # files read / total, MB, tokens, elapsed: rewritten on a terminal, plain lines (a slow
    # build only) elsewhere
    progress = None if quiet else ProgressLine(sys.stderr)
    try:
        return build_snapshot(root, tokenizer, config, progress=progress)
    finally:
        if progress is not None:
            progress.close()


def _listed_sizes(root: Path, snap: Snapshot) -> dict[str, int]:
    """The size on disk of each file listed by path only (its tokens are its path line's)."""
    sizes = {}
    for f in snap.entries("listed"):
        try:
            sizes[f.path] = (root / f.path).stat().st_size
        except OSError:
            pass
    return sizes


def _write_json(
    root: Path, window: int, window_source: str, snap: Snapshot, sizes: dict[str, int]
) -> None:
    d: dict[str, Any] = {
        "root": str(root),
        "window_tokens": window,
        "window_source": window_source,
    }
    d.update(snap.to_dict())
    for f in d["files"]:
        if f["path"] in sizes:
            f["size_bytes"] = sizes[f["path"]]
    sys.stdout.write(json.dumps(d) + "\n")


def _write_text(
    root: Path,
    window: int,
    window_source: str,
    snap: Snapshot,
    sizes: dict[str, int],
    *,
    every_file: bool,
) -> None:
    """The summary, then every file (--files) or the largest and the reasons for skipping."""
    out = SafeStream(sys.stdout)  # file names are the repository's: ESC bytes spelled out
    s = snap.summary()
    out.write(
        f"{root}: {s['tokens']} of {s['budget_tokens']} tokens, "
        f"{s['files_included']} files included, {s['files_outlined']} as outlines, "
        f"{s['files_listed']} listed by path, "
        f"{s['files_skipped']} skipped ({s['build_time_s']:.2f} s)\n"
        f"content {snap.content_hash[:16]}"
        + (f", instructions from {snap.instructions}" if snap.instructions else "")
        + "\n"
        + f"window {window} tokens ({window_source})\n"
    )
    if every_file:
        for f in snap.files:
            extra = f" ({f.reason})" if f.reason else ""
            if f.path in sizes:  # its real size, not the cost of its path line
                out.write(f"  {f.status:<12} {_size(sizes[f.path]):>10}  {f.path}{extra}\n")
            else:
                out.write(f"  {f.status:<12} {f.tokens:>10}  {f.path}{extra}\n")
        return
    biggest = sorted(snap.entries("included"), key=lambda f: (-f.tokens, f.path))[:10]
    if biggest:
        out.write("largest files:\n")
        for f in biggest:
            out.write(f"  {f.tokens:>8}  {f.path}\n")
    reasons: dict[str, int] = {}
    for f in snap.entries("skipped"):
        reasons[f.reason] = reasons.get(f.reason, 0) + 1
    if reasons:
        out.write("skipped: " + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items())) + "\n")
