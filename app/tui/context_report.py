"""/context: what the repository snapshot holds, with token counts.

Duck-typed over agent/context.py's Snapshot (tokens, budget_tokens, files with path, status,
tokens, reason), so the TUI shows whatever the session holds without building anything.
"""

from __future__ import annotations

from typing import Any

_SHOWN = 25


def format_snapshot(snapshot: Any) -> str:
    files = list(getattr(snapshot, "files", ()))
    by_status: dict[str, list[Any]] = {}
    for f in files:
        by_status.setdefault(f.status, []).append(f)
    lines = [
        f"repository snapshot: {snapshot.tokens} tokens of a {snapshot.budget_tokens}-token budget",
    ]
    instructions = getattr(snapshot, "instructions", None)
    if instructions:
        lines.append(f"instructions from {instructions}")
    for status, title in (
        ("included", "included"),
        ("listed", "listed by path (over budget)"),
        ("skipped", "skipped"),
    ):
        group = by_status.get(status, [])
        if not group:
            continue
        lines.append(f"{title}: {len(group)} files")
        ranked = sorted(group, key=lambda f: -f.tokens) if status == "included" else group
        for f in ranked[:_SHOWN]:
            extra = f"  ({f.reason})" if status != "included" and f.reason else ""
            lines.append(f"  {f.tokens:>7}  {f.path}{extra}")
        if len(group) > _SHOWN:
            lines.append(f"  … {len(group) - _SHOWN} more")
    return "\n".join(lines)


def format_summary(detail: dict[str, Any]) -> str:
    """From a ContextEvent's detail, when only the figures are known."""
    parts = [f"{k.replace('_', ' ')}: {v}" for k, v in detail.items() if k != "content_hash"]
    return "repository snapshot\n  " + "\n  ".join(parts) if parts else "repository snapshot"
