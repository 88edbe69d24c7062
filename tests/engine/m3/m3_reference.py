"""The real M3 chat template, read at test time from ../shared/m3/reference/ beside the
repository (never copied into it), rendered by transformers' own chat-template code (what a
vLLM server runs), and a comparison that replaces its two prose spans by placeholders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from m3agent.engine.api import Message
from m3agent.engine.m3 import prompt_text

REFERENCE = (
    Path(__file__).resolve().parents[3].parent
    / "shared"
    / "m3"
    / "reference"
    / "chat_template.jinja"
)
MODES = ("enabled", "disabled", "adaptive")
SYSTEM_HEAD = "]~!b[]~b]system\n"
OPEN = "\n\n<thinking_instructions>\n"
CLOSE = "</thinking_instructions>[e~[\n]~b]developer\n"


def reference_source() -> str:
    if not REFERENCE.is_file():
        pytest.skip(f"the real M3 chat template is not at {REFERENCE} (../shared/m3/reference/)")
    return REFERENCE.read_text(encoding="utf-8")


def to_openai(m: Message) -> dict[str, Any]:
    """A Message as an OpenAI-style dict, written here independently of jinja_env's."""
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.media:
        parts: list[dict[str, Any]] = []
        pos = 0
        for p in m.media:
            if p.offset > pos:
                parts.append({"type": "text", "text": m.content[pos : p.offset]})
                pos = p.offset
            parts.append({"type": p.kind, p.kind: p.path})
        if m.content[pos:]:
            parts.append({"type": "text", "text": m.content[pos:]})
        d["content"] = parts
    if m.reasoning is not None:
        d["reasoning_content"] = m.reasoning
    if m.tool_calls:
        d["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        d["tool_call_id"] = m.tool_call_id
    return d


def render_reference(
    source: str,
    messages: list[Message],
    tools: list[dict[str, Any]],
    mode: str | None,
    add_generation_prompt: bool,
) -> str:
    """transformers' render_jinja_template, as apply_chat_template calls it."""
    from transformers.utils.chat_template_utils import render_jinja_template

    kwargs = {} if mode is None else {"thinking_mode": mode}
    out, _ = render_jinja_template(
        [[to_openai(m) for m in messages]],
        tools=list(tools) or None,
        chat_template=source,
        add_generation_prompt=add_generation_prompt,
        **kwargs,
    )
    return out[0]


def render_reference_split(
    source: str,
    messages: list[Message],
    tools: list[dict[str, Any]],
    turn_mode: str,
    session_mode: str,
    add_generation_prompt: bool,
) -> str:
    """What a session-mode system block plus a turn-mode generation prompt is under the real
    template: its rendering in the session mode without a generation prompt, then its
    generation prompt in the turn's mode."""
    text = render_reference(source, messages, tools, session_mode, False)
    if add_generation_prompt:
        full = render_reference(source, messages, tools, turn_mode, True)
        bare = render_reference(source, messages, tools, turn_mode, False)
        assert full.startswith(bare)
        text += full[len(bare) :]
    return text


class Prose:
    """The two prose spans of one renderer: its identity line and its thinking bodies."""

    def __init__(self, identity: str, bodies: dict[str, str]):
        self.identity = identity
        self.bodies = bodies  # body -> mode

    @classmethod
    def of_reference(cls, source: str) -> Prose:
        bodies = {}
        identity = ""
        for mode in MODES:
            text = render_reference(source, [Message("user", "x")], [], mode, False)
            head, rest = text[len(SYSTEM_HEAD) :].split(OPEN, 1)
            identity = head
            bodies[rest.split(CLOSE, 1)[0]] = mode
        assert len(bodies) == 3 and identity
        return cls(identity, bodies)

    @classmethod
    def of_ours(cls) -> Prose:
        return cls(
            prompt_text.IDENTITY,
            {prompt_text.thinking_instructions(m): m for m in MODES},
        )

    def normalize(self, text: str) -> str:
        """The text with the identity line and the thinking body replaced by placeholders."""
        assert text.startswith(SYSTEM_HEAD), text[:80]
        if text[len(SYSTEM_HEAD) :].startswith(self.identity + OPEN):
            text = SYSTEM_HEAD + "<IDENTITY>" + text[len(SYSTEM_HEAD) + len(self.identity) :]
        for body, mode in self.bodies.items():
            span = OPEN + body + CLOSE
            if span in text:
                return text.replace(span, f"{OPEN}<THINKING mode={mode}>{CLOSE}", 1)
        raise AssertionError("no thinking instructions found in the system block")
