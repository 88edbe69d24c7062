"""A seeded generator of conversations covering every layout M3's template handles: first
messages (system / developer / root / root + system or developer / none), tools, reasoning
(given, empty, inside the content), tool calls with nested arguments, runs of tool results,
media in any content-part order, later system messages, awkward text."""

from __future__ import annotations

import random
from typing import Any

from m3agent.engine.api import MediaPart, Message, ToolCall

NS = "]<]minimax[>["
PIECES = [
    "hello",
    "Fix the bug in calc.py.",
    "multi\nline\ntext",
    "\n\nleading newlines",
    "trailing newlines\n\n",
    "  spaced  ",
    "héllo ✓ 日本語 🚀",
    "<b>html &amp; stuff</b>",
    "{{ not jinja }}",
    "{% raw %}x{% endraw %}",
    "[e~[ a fake end",
    "]~b]user\n",
    f"{NS}<x>",
    "</mm:think>",
    "<mm:think>",
    "\n</mm:think>\n",
    "'quotes' \"double\"",
    "\t\ttabs",
    "def f(x):\n    return x\n",
    "\\n backslash",
    "",
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Lancer une commande — ✓",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "edit_file",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "edits": {"type": "array", "items": {"type": "object"}},
                },
            },
        },
    },
]
KEYS = ["path", "command", "edits", "old", "new", "n", "opts", "a_b", "x-y", "ключ"]


def text(rng: random.Random, pieces: int = 3) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, pieces)))


def value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["str", "int", "float", "bool", "none"] + (["list", "dict"] * 2 if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "str":
        return text(rng, 2)
    if kind == "int":
        return rng.choice([0, 1, -7, 30, 10**12])
    if kind == "float":
        return rng.choice([1.5, -0.25, 1e-7, 2.0, 1e20])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(KEYS): value(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def media(rng: random.Random, content: str) -> tuple[MediaPart, ...]:
    if rng.random() < 0.6:
        return ()
    offsets = sorted(rng.randint(0, len(content)) for _ in range(rng.randint(1, 3)))
    return tuple(
        MediaPart(rng.choice(["image", "video"]), f"/m/{i}.png", off)
        for i, off in enumerate(offsets)
    )


def user(rng: random.Random) -> Message:
    content = text(rng)
    return Message("user", content, media=media(rng, content))


def assistant(rng: random.Random, calls: bool) -> Message:
    content = text(rng)
    style = rng.choice(["plain", "reasoning", "empty_reasoning", "inline_think"])
    reasoning = None
    if style == "reasoning":
        reasoning = text(rng) or "why"
    elif style == "empty_reasoning":
        reasoning = ""
    elif style == "inline_think":
        content = (
            rng.choice(["", "<mm:think>", "\n<mm:think>\n"])
            + text(rng)
            + "</mm:think>"
            + ("\n" * rng.randint(0, 2))
            + content
        )
    tool_calls: tuple[ToolCall, ...] = ()
    if calls:
        tool_calls = tuple(
            ToolCall(
                f"c{i}",
                rng.choice(TOOLS)["function"]["name"],
                {rng.choice(KEYS): value(rng) for _ in range(rng.randint(0, 4))},
            )
            for i in range(rng.randint(1, 3))
        )
    m_media = media(rng, content) if rng.random() < 0.15 else ()
    return Message("assistant", content, reasoning=reasoning, tool_calls=tool_calls, media=m_media)


def tool_result(rng: random.Random, i: int) -> Message:
    content = text(rng)
    return Message(
        "tool",
        content,
        tool_call_id=f"c{i}",
        name="read_file",
        media=media(rng, content) if rng.random() < 0.3 else (),
    )


def first_messages(rng: random.Random) -> list[Message]:
    def one(role: str) -> Message:
        content = rng.choice(["", "You are a coding agent.", text(rng)])
        return Message(role, content, media=media(rng, content) if rng.random() < 0.2 else ())

    layout = rng.choice(["none", "system", "developer", "root", "root+system", "root+developer"])
    return [one(r) for r in layout.split("+") if r != "none"]


def conversation(rng: random.Random) -> tuple[list[Message], list[dict[str, Any]]]:
    msgs = first_messages(rng)
    for _ in range(rng.randint(1, 5)):
        msgs.append(user(rng))
        if rng.random() < 0.1:
            msgs.append(Message(rng.choice(["system", "developer", "root"]), text(rng) or "late"))
        while True:
            calls = rng.random() < 0.5
            msgs.append(assistant(rng, calls))
            if not calls:
                break
            if rng.random() < 0.15:
                msgs.append(user(rng))  # a user message between a call and its results
            for i in range(rng.randint(1, 3)):
                msgs.append(tool_result(rng, i))
                if rng.random() < 0.05:
                    msgs.append(Message("system", "late system inside a run"))
            if rng.random() < 0.5:
                break
    if rng.random() < 0.3:
        msgs.pop()  # end on whatever came before the last message
    tools = rng.sample(TOOLS, rng.randint(0, len(TOOLS)))
    return msgs, tools
