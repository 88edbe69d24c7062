"""`m3agent cache [--json]` and `m3agent cache clear [MODEL]`: the native engine's disk tier.

What the KV disk cache keeps (docs/kv-cache.md): its folder, budget and, per model identity, the
model's name, pages, bytes and when it was last used; `clear` deletes every model's pages or one
model's (by name or identity key). No model is loaded and torch is not imported.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import typer
from m3agent.engine.native.kvstore.folder import clear, summarize

from ..cli_errors import die
from ..safe_text import one_line
from ..settings import load_settings

if TYPE_CHECKING:
    from ..settings import Settings


def _settings() -> Settings:
    try:
        return load_settings()
    except ValueError as e:
        die(str(e))


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _ago(t: float | None) -> str:
    if t is None:
        return "never"
    s = max(0.0, time.time() - t)
    if s < 120:
        return f"{s:.0f} s ago"
    if s < 7200:
        return f"{s / 60:.0f} min ago"
    if s < 172800:
        return f"{s / 3600:.0f} h ago"
    return f"{s / 86400:.0f} days ago"


def register(app: typer.Typer) -> None:
    cache_app = typer.Typer(
        help="The native engine's KV cache on disk: what it keeps (sessions that survive a "
        "restart), and `clear`.",
        invoke_without_command=True,
    )
    app.add_typer(cache_app, name="cache")

    @cache_app.callback()
    def show(
        ctx: typer.Context,
        as_json: bool = typer.Option(False, "--json", help="One JSON object on stdout."),
    ) -> None:
        """Show the folder, its budget and what each model keeps there."""
        if ctx.invoked_subcommand is not None:
            return

        settings = _settings()
        root = settings.kv_cache_dir
        models = summarize(root)
        total = sum(m.bytes for m in models)
        if as_json:
            out = {
                "dir": str(root),
                "budget_bytes": settings.kv_cache_bytes,
                "bytes": total,
                "pages": sum(m.pages for m in models),
                "models": [
                    {
                        "key": m.key,
                        "name": m.name,
                        "pages": m.pages,
                        "bytes": m.bytes,
                        "last_used": m.last_used,
                        **{
                            k: m.detail[k]
                            for k in ("cache_dtype", "device", "engine")
                            if k in m.detail
                        },
                    }
                    for m in models
                ],
            }
            typer.echo(json.dumps(out, indent=1))
            return
        budget = (
            "off (kv_disk_cache_gb = 0)"
            if settings.kv_cache_bytes <= 0
            else f"budget {_size(settings.kv_cache_bytes)}"
        )
        typer.echo(f"KV disk cache: {root} ({budget})")
        if not models:
            typer.echo("  empty")
            return
        typer.echo(f"  {_size(total)} in {sum(m.pages for m in models)} pages")
        for m in models:
            extra = ", ".join(
                str(m.detail[k]) for k in ("cache_dtype", "device", "engine") if k in m.detail
            )
            line = (
                f"  {m.name} [{m.key[:12]}]: {m.pages} pages, {_size(m.bytes)}, "
                f"used {_ago(m.last_used)}" + (f" ({extra})" if extra else "")
            )
            typer.echo(one_line(line))  # a shared folder's model.json is anyone's text

    @cache_app.command("clear")
    def clear_cmd(
        model: str | None = typer.Argument(
            None, help="Only this model's pages: its name or identity key (default: all)."
        ),
    ) -> None:
        """Delete the kept pages (the next turn of a session recomputes its prompt)."""
        root = _settings().kv_cache_dir
        try:
            pages, size = clear(root, model)
        except ValueError as e:
            die(str(e))
        typer.echo(f"deleted {pages} pages ({_size(size)}) from {root}")
