"""`m3agent context [--json] [--cwd DIR] [--budget N]`: what the repository snapshot holds.

Files included (tokens each), listed by path only (over budget), skipped (with the reason),
the total, the budget and the content hash. No engine is loaded: the budget comes from
--budget, the `context_budget` setting, or the model's context (its config.json for a native
or vLLM model directory, else M3's) minus `context_reserve`.
"""

from __future__ import annotations

from pathlib import Path

import typer

M3_CONTEXT_TOKENS = 1_048_576  # MiniMax M3's window when no model directory says otherwise


def _max_context(settings) -> int:
    from m3agent.engine.m3.config import load_config

    if settings.engine in ("native", "vllm") and settings.model:
        try:
            return load_config(Path(settings.model).expanduser()).text_config.max_model_len
        except ValueError:
            pass  # no readable config: fall back to M3's own window
    return M3_CONTEXT_TOKENS


def register(app: typer.Typer) -> None:
    @app.command("context")
    def context(
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
        cwd: Path = typer.Option(Path("."), "--cwd", help="Repository (default: here)."),
        budget: int | None = typer.Option(None, "--budget", help="Token budget of the snapshot."),
        files: bool = typer.Option(False, "--files", help="Text: list every file, not a summary."),
    ) -> None:
        """Show what the repository snapshot of a session started here would hold."""
        import json
        import sys

        from m3agent.agent.context import build_snapshot
        from m3agent.app.cli_errors import die as fail
        from m3agent.app.factory import snapshot_config, snapshot_tokenizer
        from m3agent.app.settings import load_settings

        root = cwd.expanduser().resolve()
        if not root.is_dir():
            fail(f"{root} is not a directory")
        if budget is not None and budget < 1:
            fail(f"--budget must be positive, got {budget}")
        try:
            settings = load_settings()
            config = snapshot_config(settings, _max_context(settings), budget)
            if config is None:
                fail("the context reserve leaves no room for a snapshot (lower context_reserve)")
            tokenizer = snapshot_tokenizer(settings)
            from m3agent.app.progress_line import ProgressLine

            progress = ProgressLine(sys.stderr)  # files and tokens so far, on a terminal only
            try:
                snap = build_snapshot(root, tokenizer, config,  # type: ignore[arg-type]
                                      progress=progress)
            finally:
                progress.close()
        except ValueError as e:
            fail(str(e))
            return
        if as_json:
            sys.stdout.write(json.dumps({"root": str(root), **snap.to_dict()}) + "\n")
            return
        out = sys.stdout
        s = snap.summary()
        out.write(
            f"{root}: {s['tokens']} of {s['budget_tokens']} tokens, "
            f"{s['files_included']} files included, {s['files_listed']} listed by path, "
            f"{s['files_skipped']} skipped ({s['build_time_s']:.2f} s)\n"
            f"content {snap.content_hash[:16]}"
            + (f", instructions from {snap.instructions}" if snap.instructions else "")
            + "\n"
        )
        if files:
            for f in snap.files:
                extra = f" ({f.reason})" if f.reason else ""
                out.write(f"  {f.status:<12} {f.tokens:>8}  {f.path}{extra}\n")
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
