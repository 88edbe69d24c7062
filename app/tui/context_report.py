"""/context: what the repository snapshot holds, with token counts, from the figures of its
ContextEvent (the TUI shows what the session reported, without building anything)."""

from __future__ import annotations

from typing import Any

# The ContextEvent's keys the summary spells out itself; other keys follow as "key: value".
_KNOWN = {
    "files",
    "tokens",
    "budget_tokens",
    "content_hash",
    "files_included",
    "files_outlined",
    "files_listed",
    "files_skipped",
    "instructions",
    "build_time_s",
}


def format_summary(detail: dict[str, Any], resumed: bool = False) -> str:
    """From a ContextEvent's detail (a live one, or the log's when resumed), when only the
    figures are known: sentences, never raw keys or None."""
    d = detail
    head = "repository snapshot"
    if d.get("tokens") is not None:
        budget = d.get("budget_tokens")
        head += f": {d['tokens']:,} tokens" + (f" of a {budget:,}-token budget" if budget else "")
    lines = [head + (" (taken when the session started; kept in its log)" if resumed else "")]
    counts = [
        f"{d[k]} {word}"
        for k, word in (
            ("files_included", "included"),
            ("files_outlined", "outlined"),
            ("files_listed", "listed by path"),
            ("files_skipped", "skipped"),
        )
        if d.get(k)
    ]
    if counts:
        lines.append("  files: " + ", ".join(counts))
    elif d.get("files") is not None:
        lines.append(f"  files: {d['files']}")
    inst = d.get("instructions")
    if inst:
        shown = ", ".join(inst) if isinstance(inst, (list, tuple)) else str(inst)
        lines.append(f"  instructions from {shown}")
    if d.get("build_time_s") is not None:
        lines.append(f"  built in {d['build_time_s']:.1f} s")
    for k, v in d.items():
        if k not in _KNOWN and v is not None:
            lines.append(f"  {k.replace('_', ' ')}: {v}")
    return "\n".join(lines)
