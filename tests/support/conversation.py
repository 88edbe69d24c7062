"""Conversations the engine and agent tests build again and again."""

from __future__ import annotations

from typing import Any

from m3agent.engine.api import Message, ToolCall


def tool_round(
    user: str,
    call: ToolCall,
    output: str,
    *,
    text: str = "",
    reasoning: str | None = None,
    **assistant: Any,
) -> tuple[Message, Message, Message]:
    """A user turn that the assistant answers with one tool call (after `reasoning`, beside
    `text`; `assistant` adds the message's other fields), and the call's result `output`,
    named and linked as the agent's tool step writes it."""
    return (
        Message("user", user),
        Message("assistant", text, reasoning=reasoning, tool_calls=(call,), **assistant),
        Message("tool", output, tool_call_id=call.id, name=call.name),
    )
