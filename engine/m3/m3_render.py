"""The built-in M3 renderer: our own code for the layout of M3's chat template.

It produces, byte for byte, what the checkpoints' `chat_template.jinja` produces (the tests
render generated conversations with both), except for the two prose spans that are our own
words (engine/m3/prompt_text.py):

* `]~!b[]~b]system\\n` + the system text (a `root` first message, else our identity line) +
  thinking instructions whose last line names the SESSION's thinking mode + `[e~[\\n`;
* `]~b]developer\\n` + the developer text (a first `system`/`developer` message, or the one
  right after a `root`; else "You are a helpful assistant.") + the tools section + `[e~[\\n`;
* turns: `]~b]user\\n...[e~[\\n`; `]~b]ai\\n` + `<mm:think>reasoning</mm:think>` (or a bare
  `</mm:think>` when there is none) + content + the tool-call block, no newline between;
  consecutive tool results share one `]~b]tool` block of `\\n<response>...</response>`; a
  tool result with no earlier assistant tool call is an error; any later system / developer /
  root message renders as nothing (so the agent never sends one);
* media render as placeholders where they sit in the content;
* the generation prompt `]~b]ai\\n` + `<mm:think>` (enabled) / `</mm:think>` (disabled) /
  nothing (adaptive) for the TURN's mode.

The session mode (system block) and the turn mode (generation prefix) are separate arguments:
a per-turn change touches only the last few tokens, never the cached prefix.

Our one extension: an assistant message with `raw_text` (the model's exact output) is written
verbatim after the generation prefix of the mode its turn ran under, so the prompt of turn n+1
starts with the prompt of turn n plus what the model wrote, token for token.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..api import Message, ToolCall
from . import prompt_text as P
from .prompt_parts import Kind, PartsBuilder, PromptPart
from .tokens import (
    BOS,
    EOS,
    IMAGE,
    INVOKE_END,
    NS,
    ROLE,
    THINK_END,
    THINK_START,
    TOOL_CALL_END,
    TOOL_CALL_START,
    VIDEO,
)
from .xml_args import to_xml

Runs = list[tuple[Kind, str]]
_FIRST_ROLES = ("system", "developer")
_ROLES = ("root", "system", "developer", "user", "assistant", "tool")


def tool_json(tool: dict[str, Any]) -> str:
    """One tool's function object as JSON: key order as given (HF's tojson), UTF-8 kept."""
    return json.dumps(tool.get("function", tool), ensure_ascii=False)


def render_tool_calls(calls: Sequence[ToolCall]) -> str:
    """An assistant's tool calls as the model writes them (the template's to_xml macro)."""
    invokes = "".join(
        f'{NS}<invoke name="{c.name}">{to_xml(c.arguments)}{INVOKE_END}\n' for c in calls
    )
    return f"{TOOL_CALL_START}\n{invokes}{TOOL_CALL_END}"


def visible_runs(m: Message) -> Runs:
    """The message's content with its media placeholders where they sit (template markup)."""
    if not m.media:
        return [("text", m.content)] if m.content else []
    out: Runs = []
    pos = 0
    for p in m.media:
        if not pos <= p.offset <= len(m.content):
            raise ValueError(
                f"media offset {p.offset} is outside the {m.role} message's content or out of order"
            )
        if p.offset > pos:
            out.append(("text", m.content[pos : p.offset]))
            pos = p.offset
        out.append(("template", IMAGE if p.kind == "image" else VIDEO))
    if pos < len(m.content):
        out.append(("text", m.content[pos:]))
    return out


def _slice(runs: Runs, start: int, end: int) -> Runs:
    """The runs covering characters [start, end) of their joined text."""
    out: Runs = []
    pos = 0
    for kind, s in runs:
        lo, hi = max(start, pos), min(end, pos + len(s))
        if lo < hi:
            out.append((kind, s[lo - pos : hi - pos]))
        pos += len(s)
    return out


def _strip_nl(s: str, lo: int, hi: int) -> tuple[int, int]:
    while lo < hi and s[lo] == "\n":
        lo += 1
    while hi > lo and s[hi - 1] == "\n":
        hi -= 1
    return lo, hi


def split_think(runs: Runs) -> tuple[Runs, Runs] | None:
    """(reasoning, content) from content holding a think block, as the template splits it:
    reasoning = before the first `</mm:think>`, after the last `<mm:think>` there; content =
    after the last `</mm:think>`; newlines stripped at both ends of each. None: no closer."""
    s = "".join(t for _, t in runs)
    first = s.find(THINK_END)
    if first < 0:
        return None
    lo, hi = _strip_nl(s, 0, first)
    opener = s.rfind(THINK_START, lo, hi)
    if opener >= 0:
        lo = opener + len(THINK_START)
    reasoning = _slice(runs, *_strip_nl(s, lo, hi))
    content = _slice(runs, *_strip_nl(s, s.rfind(THINK_END) + len(THINK_END), len(s)))
    return reasoning, content


def _assistant(out: PartsBuilder, m: Message, turn_mode: str) -> None:
    out.t(f"{ROLE}ai\n")
    if m.raw_text is not None:
        out.t(P.GENERATION_PREFIX[m.thinking_mode or turn_mode])
        out.m(m.raw_text, keep_empty=True)  # the model's own markup: engine/m3/prompt_parts
        return
    content = visible_runs(m)
    reasoning: Runs = [("text", m.reasoning)] if m.reasoning else []
    if m.reasoning is None and (split := split_think(content)) is not None:
        reasoning, content = split
    if any(s for _, s in reasoning):
        out.t(THINK_START)
        out.runs(reasoning)
        out.t(THINK_END)
    else:
        out.t(THINK_END)
    out.runs(content)
    if m.tool_calls:
        out.m(render_tool_calls(m.tool_calls))


def _first_messages(
    messages: Sequence[Message],
) -> tuple[Message | None, Message | None, Sequence[Message]]:
    """(root, developer, the rest): `root` first, then optionally system/developer."""
    if messages and messages[0].role == "root":
        rest = messages[1:]
        if rest and rest[0].role in _FIRST_ROLES:
            return messages[0], rest[0], rest[1:]
        return messages[0], None, rest
    if messages and messages[0].role in _FIRST_ROLES:
        return None, messages[0], messages[1:]
    return None, None, messages


def _has_content(m: Message | None) -> bool:
    return m is not None and bool(m.content or m.media)


def render_builtin(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    thinking_mode: str,
    add_generation_prompt: bool,
    session_thinking_mode: str,
) -> list[PromptPart]:
    root, developer, conv = _first_messages(messages)
    out = PartsBuilder()
    out.t(f"{BOS}{ROLE}system\n")
    if root is not None and _has_content(root):
        out.runs(visible_runs(root))
    else:
        out.t(P.IDENTITY)
    out.t(P.THINKING_OPEN + P.thinking_instructions(session_thinking_mode) + P.THINKING_CLOSE)
    out.t(f"{EOS}\n{ROLE}developer\n")
    if developer is not None and _has_content(developer):
        out.runs(visible_runs(developer))
    else:
        out.t(P.DEFAULT_DEVELOPER)
    if tools:
        out.t(P.TOOLS_HEAD)
        for tool in tools:
            out.t("<tool>")
            out.x(tool_json(tool))
            out.t("</tool>\n")
        out.t(P.TOOLS_TAIL)
    out.t(f"{EOS}\n")

    last_call: str | None = None  # the name of the last assistant message's last tool call
    n = len(conv)
    for i, m in enumerate(conv):
        if m.role == "assistant":
            _assistant(out, m, thinking_mode)
            last_call = m.tool_calls[-1].name if m.tool_calls else None
            out.t(f"{EOS}\n")
        elif m.role == "tool":
            if last_call is None:
                raise ValueError(
                    "a tool message needs an earlier assistant message with a tool call"
                )
            if i == 0 or conv[i - 1].role != "tool":
                out.t(f"{ROLE}tool")
            out.t("\n<response>")
            out.runs(visible_runs(m))
            out.t("</response>")
            if i + 1 == n or conv[i + 1].role != "tool":
                out.t(f"{EOS}\n")
        elif m.role == "user":
            out.t(f"{ROLE}user\n")
            out.runs(visible_runs(m))
            out.t(f"{EOS}\n")
        elif m.role not in _ROLES:
            raise ValueError(f"unknown message role {m.role!r}")
        # A later root/system/developer message: M3's template renders nothing for it.
    if add_generation_prompt:
        out.t(f"{ROLE}ai\n{P.GENERATION_PREFIX[thinking_mode]}")
    return out.parts
