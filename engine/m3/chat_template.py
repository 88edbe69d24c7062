"""Messages + tools + thinking mode -> the M3 prompt text (SPEC §4.8).

Two renderers behind one `ChatTemplate`:

* a checkpoint's own `chat_template.jinja` (or tokenizer_config.json's `chat_template`), run
  in a sandboxed jinja2 environment with HF's conventions (trim_blocks, lstrip_blocks,
  order-preserving `tojson`), messages passed as OpenAI-style dicts;
* otherwise our reconstruction of M3's format: a `]~!b[]~b]system` block (identity + thinking
  instructions, the same text in every mode), a `]~b]developer` block (the user's system prompt and the tools,
  one `<tool>{json}</tool>` per line), `]~b]user\\n...[e~[\\n` turns, and the assistant prefix
  `]~b]ai\\n` + `<mm:think>` (enabled) / `</mm:think>` (disabled) / nothing (adaptive).
  Tool results render as `]~b]tool\\n<response>...</response>[e~[\\n` (consecutive results
  share one block, M2's layout). THAT PART IS UNVERIFIED for M3: the real template's tool-result
  rendering could not be retrieved.

Prefix caching: an assistant message with `raw_text` is emitted verbatim after the same
prefix its turn was generated with, so the prompt of turn n+1 starts with the prompt of turn n
plus the model's exact output. Nothing in the prompt depends on time. The guarantee holds for
the built-in renderer; a checkpoint template decides for itself.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from m3agent.engine.api import Message, ToolCall
from m3agent.engine.m3.tokens import (
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
    check_thinking_mode,
)
from m3agent.engine.m3.xml_args import to_xml

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant."
IDENTITY = "You are MiniMax-M3, a helpful AI assistant built by MiniMax."
# One text for every thinking mode: the mode is carried by the assistant prefix of each turn
# (open think block / closed block / nothing), never by the system block, so switching the
# mode per turn keeps every earlier token of the prompt and the prefix cache stays valid.
# Words, not the marker strings: a prompt that contains the markers confuses servers that
# decide the reasoning state from the prompt ids (SPEC Addendum).
THINKING_INSTRUCTIONS = (
    "Thinking: each of your turns starts in one of three ways. If it starts inside an open "
    "think block, reason step by step there first, then close it and answer. If it starts "
    "with the block already closed, answer directly. Otherwise decide for yourself: open a "
    "think block when the task needs reasoning, else answer directly."
)
TOOLS_PREAMBLE = (
    "# Tools\n"
    "You may call one or more tools to assist with the user query.\n"
    "Here are the tools available in JSONSchema format:\n"
)
TOOLS_FORMAT = (
    "When making tool calls, use XML format to invoke tools and pass parameters:\n"
    f'{TOOL_CALL_START}\n{NS}<invoke name="tool-name-1">{NS}<param-key-1>param-value-1'
    f"{NS}</param-key-1>{NS}<param-key-2>param-value-2{NS}</param-key-2>...{INVOKE_END}\n"
    f"{TOOL_CALL_END}\n"
    f"Arrays repeat {NS}<item>...{NS}</item>; objects nest elements named after their keys."
)


def generation_prefix(thinking_mode: str) -> str:
    """What follows `]~b]ai\\n` before the model's first token."""
    return {"enabled": THINK_START, "disabled": THINK_END, "adaptive": ""}[thinking_mode]


def tool_json(tool: dict[str, Any]) -> str:
    """One tool's function object as JSON: key order as given (HF's tojson), UTF-8 kept."""
    return json.dumps(tool.get("function", tool), ensure_ascii=False)


def render_tool_calls(calls: Sequence[ToolCall]) -> str:
    """An assistant's tool calls as the model writes them (the template's to_xml macro)."""
    invokes = "".join(
        f'{NS}<invoke name="{c.name}">{to_xml(c.arguments)}{INVOKE_END}\n' for c in calls
    )
    return f"{TOOL_CALL_START}\n{invokes}{TOOL_CALL_END}"


@dataclass(frozen=True, slots=True)
class PromptPart:
    """A run of prompt text. "template": the renderer's own markup, marker strings in it are
    tokens. "text": content from outside (messages, tool results, schemas, model output):
    `M3Tokenizer.encode_parts` keeps special-token strings in it as plain text, so a file that
    contains `[e~[` cannot end a turn early."""

    text: str
    kind: Literal["template", "text"]


class _Parts:
    def __init__(self) -> None:
        self.parts: list[PromptPart] = []

    def add(self, kind: Literal["template", "text"], s: str, *, keep_empty: bool = False) -> None:
        # Adjacent runs of one kind merge; an empty "text" run is kept where asked (the
        # assistant slot) so the template run before it ends exactly where the generation
        # prompt of the previous turn ended: then encode_parts keeps the prefix token for token.
        if not s and not keep_empty:
            return
        last = self.parts[-1] if self.parts else None
        if last is not None and last.kind == kind and (s or kind == "template"):
            self.parts[-1] = PromptPart(last.text + s, kind)
        else:
            self.parts.append(PromptPart(s, kind))

    def t(self, s: str) -> None:
        self.add("template", s)

    def x(self, s: str, *, keep_empty: bool = False) -> None:
        self.add("text", s, keep_empty=keep_empty)


def _assistant(out: _Parts, m: Message, mode: str) -> None:
    if m.raw_text is not None:
        out.t(generation_prefix(m.thinking_mode or mode))
        out.x(m.raw_text, keep_empty=True)
        return
    own = m.thinking_mode or mode
    if own == "enabled" or m.reasoning:
        out.t(THINK_START)
        out.x(m.reasoning or "", keep_empty=True)
        out.t(THINK_END)
    elif own == "disabled":
        out.t(THINK_END)
    body = m.content
    if m.tool_calls:
        body += ("\n" if body else "") + render_tool_calls(m.tool_calls)
    out.x(body, keep_empty=True)


def _render_builtin(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    thinking_mode: str,
    add_generation_prompt: bool,
) -> list[PromptPart]:
    n_sys = 0
    while n_sys < len(messages) and messages[n_sys].role == "system":
        n_sys += 1
    developer = "\n\n".join(m.content for m in messages[:n_sys]) or DEFAULT_SYSTEM_PROMPT
    if tools:
        lines = "\n".join(f"<tool>{tool_json(t)}</tool>" for t in tools)
        developer += f"\n\n{TOOLS_PREAMBLE}<tools>\n{lines}\n</tools>\n\n{TOOLS_FORMAT}"
    out = _Parts()
    out.t(f"{BOS}{ROLE}system\n{IDENTITY}\n{THINKING_INSTRUCTIONS}{EOS}\n")
    out.t(f"{ROLE}developer\n")
    out.x(developer)
    out.t(f"{EOS}\n")
    rest = messages[n_sys:]
    for i, m in enumerate(rest):
        if m.role == "user":
            out.t(f"{ROLE}user\n" + "".join(IMAGE if p.kind == "image" else VIDEO for p in m.media))
            out.x(m.content)
            out.t(f"{EOS}\n")
        elif m.role == "system":  # a later system message: its own block, earlier ones untouched
            out.t(f"{ROLE}system\n")
            out.x(m.content)
            out.t(f"{EOS}\n")
        elif m.role == "assistant":
            out.t(f"{ROLE}ai\n")
            _assistant(out, m, thinking_mode)
            out.t(f"{EOS}\n")
        elif m.role == "tool":
            if i == 0 or rest[i - 1].role != "tool":
                out.t(f"{ROLE}tool")
            out.t("\n<response>")
            out.x(m.content)
            out.t("</response>")
            if i + 1 == len(rest) or rest[i + 1].role != "tool":
                out.t(f"{EOS}\n")
        else:
            raise ValueError(f"unknown message role {m.role!r}")
    if add_generation_prompt:
        out.t(f"{ROLE}ai\n{generation_prefix(thinking_mode)}")
    return out.parts


class ChatTemplate:
    """A checkpoint's jinja template, or (source None) the built-in M3 renderer."""

    def __init__(self, source: str | None = None, *, origin: str = "built-in"):
        self.source = source
        self.origin = origin
        self._template = None
        if source is not None:
            from m3agent.engine.m3.jinja_env import compile_template

            self._template = compile_template(source, origin)

    @property
    def is_builtin(self) -> bool:
        return self._template is None

    @classmethod
    def from_model_dir(cls, path: str | Path) -> ChatTemplate:
        d = Path(path)
        jinja = d / "chat_template.jinja"
        if jinja.is_file():
            return cls(jinja.read_text(encoding="utf-8"), origin=str(jinja))
        config = d / "tokenizer_config.json"
        if config.is_file():
            try:
                source = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
            except (ValueError, AttributeError) as e:
                raise ValueError(f"{config} is not a JSON object: {e}") from None
            if isinstance(source, str):
                return cls(source, origin=str(config))
        return cls()

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        thinking_mode: str,
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        parts = self.render_parts(
            messages, tools, thinking_mode, add_generation_prompt=add_generation_prompt
        )
        return "".join(p.text for p in parts)

    def render_parts(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        thinking_mode: str,
        *,
        add_generation_prompt: bool = True,
    ) -> list[PromptPart]:
        """The prompt as template/text runs (a checkpoint template gives one template run)."""
        check_thinking_mode(thinking_mode)
        tools = tools or ()
        if self._template is None:
            return _render_builtin(messages, tools, thinking_mode, add_generation_prompt)
        from m3agent.engine.m3.jinja_env import message_to_openai, render_template

        text = render_template(
            self._template,
            self.origin,
            messages=[message_to_openai(m) for m in messages],
            tools=[dict(t) for t in tools] or None,
            thinking_mode=thinking_mode,
            add_generation_prompt=add_generation_prompt,
            bos_token=BOS,
            eos_token=EOS,
        )
        return [PromptPart(text, "template")]


def render_prompt(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    thinking_mode: str,
    *,
    add_generation_prompt: bool = True,
    template: ChatTemplate | None = None,
) -> str:
    """The prompt text for `messages` (the built-in M3 renderer unless `template` is given)."""
    return (template or ChatTemplate()).render(
        messages, tools, thinking_mode, add_generation_prompt=add_generation_prompt
    )


def render_prompt_parts(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    thinking_mode: str,
    *,
    add_generation_prompt: bool = True,
    template: ChatTemplate | None = None,
) -> list[PromptPart]:
    """`render_prompt` as runs, for `M3Tokenizer.encode_parts` (joined, they are its text)."""
    return (template or ChatTemplate()).render_parts(
        messages, tools, thinking_mode, add_generation_prompt=add_generation_prompt
    )
