"""One line for a ContextEvent: snapshots, compactions and checkpoints are never silent."""

from __future__ import annotations

from typing import Any


def describe_context_event(action: str, detail: dict[str, Any]) -> str:
    if action == "checkpoint":
        # The id is long and changes every run; /undo finds the checkpoint itself.
        return "checkpoint saved before the first change of this turn (/undo restores it)"
    if action == "compact":
        before, after = detail.get("tokens_before"), detail.get("tokens_after")
        if before is not None and after is not None:
            return f"conversation compacted: {before} → {after} tokens"
        return "conversation compacted"
    if action in ("snapshot", "refresh"):
        files = detail.get("files_included", detail.get("files"))
        tokens = detail.get("tokens")
        what = (
            "repository snapshot taken" if action == "snapshot" else "repository snapshot refreshed"
        )
        if files is not None and tokens is not None:
            return f"{what}: {files} files, {tokens} tokens"
        return what
    if action == "thinking_default":
        return (
            f"session thinking mode: {detail.get('mode')} (was {detail.get('previous')}); "
            f"the next request recomputes about {detail.get('recompute_tokens', 0)} tokens"
        )
    if action == "hook":  # docs/hooks.md: which hook ran, and how it ended
        how = "timed out" if detail.get("timed_out") else f"exit {detail.get('exit_code')}"
        return f"hook {detail.get('event')}: {detail.get('command')} ({how}, {detail.get('duration_s')} s)"
    shown = ", ".join(f"{k}={v}" for k, v in detail.items())
    return f"context {action}" + (f": {shown}" if shown else "")
