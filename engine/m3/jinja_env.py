"""Running a checkpoint's chat template safely: a sandboxed jinja2 environment set up the way
Hugging Face's apply_chat_template sets it up (so real templates render as they do there).
"""

from __future__ import annotations

import json
from typing import Any

from jinja2 import Template, TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..api import Message


class _TemplateRaised(Exception):
    pass


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # HF's tojson: key order kept and no HTML escaping (jinja's own sorts keys and escapes <>).
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def compile_template(source: str, origin: str) -> Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    # No strftime_now: nothing time-dependent may enter a prompt (prefix caching).
    env.globals["raise_exception"] = _raise_exception
    try:
        return env.from_string(source)
    except TemplateError as e:
        raise ValueError(f"chat template {origin} does not compile: {e}") from None


def render_template(template: Template, origin: str, **context: Any) -> str:
    try:
        return template.render(**context)
    except _TemplateRaised as e:
        raise ValueError(f"chat template {origin} refused the conversation: {e}") from None
    except TemplateError as e:
        raise ValueError(f"chat template {origin} failed to render: {e}") from None


def message_to_openai(m: Message) -> dict[str, Any]:
    """A Message as the OpenAI-style dict that HF chat templates expect."""
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.media:
        d["content"] = content_parts(m)
    if m.reasoning is not None:
        d["reasoning_content"] = m.reasoning
    if m.tool_calls:
        d["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    if m.tool_call_id is not None:
        d["tool_call_id"] = m.tool_call_id
    if m.name is not None:
        d["name"] = m.name
    return d


def content_parts(m: Message) -> list[dict[str, Any]]:
    """The message's text and media as OpenAI-style parts, media where their offsets put them."""
    parts: list[dict[str, Any]] = []
    pos = 0
    for p in m.media:
        if p.offset > pos:
            parts.append({"type": "text", "text": m.content[pos : p.offset]})
            pos = p.offset
        parts.append({"type": p.kind, p.kind: p.path})
    if pos < len(m.content):
        parts.append({"type": "text", "text": m.content[pos:]})
    return parts
