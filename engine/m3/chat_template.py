"""Messages + tools + thinking modes -> the M3 prompt (SPEC §4.8, ../shared/m3/reference/).

Two renderers behind one `ChatTemplate`:

* a checkpoint's own `chat_template.jinja` (or tokenizer_config.json's `chat_template`), the
  first choice whenever a model directory has one, run in a sandboxed jinja2 environment with
  HF's conventions (engine/m3/jinja_env.py), messages passed as OpenAI-style dicts;
* otherwise our own renderer of the same layout (engine/m3/m3_render.py), byte for byte the
  real template's output but for our own prose in two spans.

Two thinking modes per render: `session_thinking_mode` is written in the system block and is
fixed for a session; `thinking_mode` is the turn's, applied through the generation prefix
(`<mm:think>` enabled, `</mm:think>` disabled, nothing adaptive). M3's template has one
variable for both; for a checkpoint template the prompt is its rendering in the session mode
without a generation prompt, followed by its own generation prompt for the turn's mode.

Prefix caching: an assistant message with `raw_text` is emitted verbatim after the prefix its
turn was generated with (built-in renderer), so the prompt of turn n+1 starts with the prompt
of turn n plus the model's exact output. Nothing in the prompt depends on time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..api import Message
from .m3_render import render_builtin, render_tool_calls, tool_json
from .neutralise import neutralise_deep
from .prompt_parts import PromptPart
from .prompt_text import GENERATION_PREFIX
from .tokens import BOS, EOS, SPECIAL_TOKENS, check_thinking_mode

__all__ = [
    "ChatTemplate",
    "PromptPart",
    "generation_prefix",
    "render_prompt",
    "render_prompt_parts",
    "render_tool_calls",
    "tool_json",
]


def generation_prefix(thinking_mode: str) -> str:
    """What follows `]~b]ai\\n` before the model's first token."""
    return GENERATION_PREFIX[check_thinking_mode(thinking_mode)]


class ChatTemplate:
    """A checkpoint's jinja template, or (source None) the built-in M3 renderer."""

    def __init__(self, source: str | None = None, *, origin: str = "built-in"):
        self.source = source
        self.origin = origin
        self._template = None
        self._gen_prompts: dict[str, str] = {}
        if source is not None:
            from .jinja_env import compile_template

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
        tools: Sequence[dict[str, Any]] | None,
        thinking_mode: str,
        *,
        add_generation_prompt: bool = True,
        session_thinking_mode: str = "adaptive",
    ) -> str:
        parts = self.render_parts(
            messages,
            tools,
            thinking_mode,
            add_generation_prompt=add_generation_prompt,
            session_thinking_mode=session_thinking_mode,
        )
        return "".join(p.text for p in parts)

    def render_parts(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        thinking_mode: str,
        *,
        add_generation_prompt: bool = True,
        session_thinking_mode: str = "adaptive",
    ) -> list[PromptPart]:
        """The prompt as template/text runs (engine/m3/jinja_runs.py for a checkpoint's).

        `thinking_mode` is the turn's (the generation prefix), `session_thinking_mode` the one
        written in the system block."""
        check_thinking_mode(thinking_mode)
        check_thinking_mode(session_thinking_mode)
        tools = tools or ()
        if self._template is None:
            return render_builtin(
                messages, tools, thinking_mode, add_generation_prompt, session_thinking_mode
            )
        from .jinja_runs import outside_text_runs

        same = thinking_mode == session_thinking_mode
        parts = outside_text_runs(
            lambda ms: self._render_jinja(
                ms, tools, session_thinking_mode, add_generation_prompt and same
            ),
            messages,
        )
        if add_generation_prompt and not same:
            gen = self._generation_prompt(thinking_mode)
            if parts[-1].kind == "template":
                parts[-1] = PromptPart(parts[-1].text + gen, "template")
            else:
                parts.append(PromptPart(gen, "template"))
        return parts

    def _render_jinja(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        mode: str,
        add_generation_prompt: bool,
    ) -> str:
        from .jinja_env import message_to_openai, render_template

        assert self._template is not None  # a checkpoint's template: render() checked
        # Tool schemas (an MCP server's descriptions) and tool-call arguments are printed
        # inside the template's own runs (tojson, to_xml), where markers would be tokens:
        # a schema is outside text, every marker string in it is neutralised; arguments are
        # the model's own output, as in the built-in renderer's "model" runs only the role,
        # end-of-turn and media markers are (engine/m3/neutralise.py).
        return render_template(
            self._template,
            self.origin,
            messages=[message_to_openai(_calls_neutralised(m)) for m in messages],
            tools=[neutralise_deep(dict(t)) for t in tools] or None,
            thinking_mode=mode,
            add_generation_prompt=add_generation_prompt,
            bos_token=BOS,
            eos_token=EOS,
        )

    def _generation_prompt(self, mode: str) -> str:
        """The template's own generation prompt in `mode`: what add_generation_prompt adds to
        a one-message conversation (M3's depends on the mode only)."""
        if mode not in self._gen_prompts:
            probe = [Message("user", "x")]
            bare = self._render_jinja(probe, (), mode, False)
            full = self._render_jinja(probe, (), mode, True)
            if not full.startswith(bare):
                raise ValueError(
                    f"chat template {self.origin}: its generation prompt is not a suffix, so a"
                    " turn's thinking mode cannot differ from the session's"
                )
            self._gen_prompts[mode] = full[len(bare) :]
        return self._gen_prompts[mode]


def _calls_neutralised(m: Message) -> Message:
    if not m.tool_calls:
        return m
    calls = tuple(
        replace(c, arguments=neutralise_deep(c.arguments, SPECIAL_TOKENS)) for c in m.tool_calls
    )
    return replace(m, tool_calls=calls)


def render_prompt(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] | None,
    thinking_mode: str,
    *,
    add_generation_prompt: bool = True,
    template: ChatTemplate | None = None,
    session_thinking_mode: str = "adaptive",
) -> str:
    """The prompt text for `messages` (the built-in M3 renderer unless `template` is given)."""
    return (template or ChatTemplate()).render(
        messages,
        tools,
        thinking_mode,
        add_generation_prompt=add_generation_prompt,
        session_thinking_mode=session_thinking_mode,
    )


def render_prompt_parts(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] | None,
    thinking_mode: str,
    *,
    add_generation_prompt: bool = True,
    template: ChatTemplate | None = None,
    session_thinking_mode: str = "adaptive",
) -> list[PromptPart]:
    """`render_prompt` as runs, for `M3Tokenizer.encode_parts` (joined, they are its text)."""
    return (template or ChatTemplate()).render_parts(
        messages,
        tools,
        thinking_mode,
        add_generation_prompt=add_generation_prompt,
        session_thinking_mode=session_thinking_mode,
    )
