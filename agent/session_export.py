"""A session written out (/export): Markdown for people, JSON for programs.

The JSON holds every message as the log does (system prompt and repository snapshot
included), with the session's header; the Markdown holds the conversation as it read on
screen: prompts, reasoning (folded), answers, tool calls with their arguments and results.
Writing never replaces a file: the front end asks first (`replace=True`). The file is 0600
(it holds the whole conversation) and never written through a symlink (tools/out_file.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from m3agent.engine.api import Message
from m3agent.tools.out_file import write_out

from .context import SNAPSHOT_OPEN
from .conversation import SessionMeta

EXPORT_VERSION = 1
TOOL_OUTPUT_CHARS = 4_000  # of a tool's result in the Markdown (the JSON has all of it)


def export_json(meta: SessionMeta, messages: Sequence[Message]) -> dict[str, Any]:
    return {
        "v": EXPORT_VERSION,
        "session": asdict(meta),
        "messages": [m.to_dict() for m in messages],
    }


def export_markdown(meta: SessionMeta, messages: Sequence[Message]) -> str:
    out = [
        f"# m3agent session {meta.id}",
        "",
        f"- workspace: `{meta.cwd}`",
        f"- engine: {meta.engine or '?'} {meta.model}".rstrip(),
        f"- started: {meta.created}",
        "",
    ]
    for m in messages:
        out += _message(m)
    return "\n".join(out).rstrip("\n") + "\n"


def _fence(text: str, lang: str = "") -> list[str]:
    """TEXT in a code fence longer than any run of backticks inside it."""
    ticks = "`" * max(3, _longest_backticks(text) + 1)
    return [f"{ticks}{lang}", text.rstrip("\n"), ticks, ""]


def _longest_backticks(text: str) -> int:
    best = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        best = max(best, run)
    return best


def _message(m: Message) -> list[str]:
    if m.role == "system":
        if m.content.startswith(SNAPSHOT_OPEN):
            return [f"*(repository snapshot, {len(m.content):,} characters: in the JSON)*", ""]
        return [
            "<details><summary>System prompt</summary>",
            "",
            *_fence(m.content),
            "</details>",
            "",
        ]
    if m.role == "user":
        media = "".join(f"\n\n*attached {p.kind}: `{p.path}`*" for p in m.media)
        return ["## User", "", m.content.rstrip() + media, ""]
    if m.role == "tool":
        output = m.content
        if len(output) > TOOL_OUTPUT_CHARS:
            cut = len(output) - TOOL_OUTPUT_CHARS
            output = output[:TOOL_OUTPUT_CHARS] + f"\n[… {cut} more characters: in the JSON]"
        return [f"**Result** of `{m.name or 'tool'}`:", "", *_fence(output)]
    lines = ["## Assistant", ""]
    if m.reasoning and m.reasoning.strip():
        lines += [
            "<details><summary>Reasoning</summary>",
            "",
            m.reasoning.strip(),
            "",
            "</details>",
            "",
        ]
    if m.content.strip():
        lines += [m.content.rstrip(), ""]
    for call in m.tool_calls:
        lines += [f"**Tool call** `{call.name}`:", ""]
        lines += _fence(json.dumps(call.arguments, indent=1, ensure_ascii=False), "json")
    return lines


def write_export(
    path: Path, text: str, *, roots: Sequence[Path] = (), replace: bool = False
) -> None:
    """TEXT to PATH as a 0600 file, created whole (tools/out_file.py: a link the model planted
    at PATH, or in ROOTS on the way to it, is never written through); FileExistsError
    when PATH is there (a dangling link too) and REPLACE is not set, OSError for the rest."""
    path = Path(path)
    if os.path.lexists(path) and not replace:
        raise FileExistsError(str(path))
    write_out(path, text, roots=roots, replace=replace)
