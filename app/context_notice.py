"""One line for a ContextEvent: snapshots, compactions and checkpoints are never silent."""

from __future__ import annotations

from typing import Any

from .safe_text import one_line


def describe_context_event(action: str, detail: dict[str, Any]) -> str:
    if action == "checkpoint":
        # The id is long and changes every run; /undo finds the checkpoint itself.
        return "checkpoint saved before the first change of this turn (/undo restores it)"
    if action == "rewind":
        dropped = detail.get("dropped_messages")
        files = detail.get("files") or "files: left as they are"
        return (
            f"rewound to before prompt {detail.get('turn', '?')}: {dropped} message(s) left the "
            f"conversation (the session log keeps them); {files}"
        )
    if action == "compact":
        return _compacted(detail)
    if action in ("snapshot", "refresh"):
        files = detail.get("files_included", detail.get("files"))
        tokens = detail.get("tokens")
        what = (
            "repository snapshot taken" if action == "snapshot" else "repository snapshot refreshed"
        )
        if files is not None and tokens is not None:
            return f"{what}: {files} files, {tokens} tokens"
        return what
    if action == "instructions":
        files = detail.get("files") or []
        return f"instructions read from {len(files)} more file(s): " + ", ".join(files)
    if action == "thinking_default":
        return (
            f"session thinking mode: {detail.get('mode')} (was {detail.get('previous')}); "
            f"the next request recomputes about {detail.get('recompute_tokens', 0)} tokens"
        )
    if action == "hook":  # docs/hooks.md: which hook ran, and how it ended
        how = "timed out" if detail.get("timed_out") else f"exit {detail.get('exit_code')}"
        command = one_line(str(detail.get("command")))  # the repository's text, on its line
        return f"hook {detail.get('event')}: {command} ({how}, {detail.get('duration_s')} s)"
    shown = ", ".join(f"{k}={v}" for k, v in detail.items())
    return f"context {action}" + (f": {shown}" if shown else "")


_SOURCES = {"model": "the model's summary", "mechanical": "a summary of the tool calls"}


def _compacted(d: dict[str, Any]) -> str:
    """What /compact freed, in what the event knows: messages, and tokens where counted."""
    if d.get("note") == "nothing to compact":
        return "nothing to compact: the conversation holds only the system prompt and snapshot"
    before, after = d.get("tokens_before"), d.get("tokens_after")
    if before is not None and after is not None:
        return f"conversation compacted: {before:,} → {after:,} tokens"
    line = "conversation compacted"
    m0, m1 = d.get("messages_before"), d.get("messages_after")
    if m0 is not None and m1 is not None:
        line += f": {m0} → {m1} messages"
    if d.get("summary_source") in _SOURCES:
        line += f" ({_SOURCES[d['summary_source']]})"
    if before is not None:
        line += f"; the prompt held {before:,} tokens, the next request shows what is left"
    return line
