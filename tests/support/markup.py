"""Raw MiniMax M3 model text for scripted engines (tool calls and answers as the model writes
them after the prompt opened <mm:think>), and OpenAI-format tool schemas to offer it."""

from __future__ import annotations

NS = "]<]minimax[>["
# A system prompt over a few 128-token pages: long enough for prefix-cache hits to show.
SYSTEM = "You are a careful coding agent working in a repository. " * 30


def invoke(name: str, **params: str) -> str:
    body = "".join(f"{NS}<{k}>{v}{NS}</{k}>" for k, v in params.items())
    return f'{NS}<invoke name="{name}">{body}{NS}</invoke>\n'


def calls(*invokes: str, before: str = "", reasoning: str | None = "") -> str:
    """A turn ending in tool calls; reasoning None: no </mm:think> (a non-thinking turn)."""
    head = f"{reasoning}</mm:think>" if reasoning is not None else ""
    return f"{head}{before}{NS}<tool_call>\n{''.join(invokes)}{NS}</tool_call>"


def answer(text: str, reasoning: str | None = "") -> str:
    head = f"{reasoning}</mm:think>" if reasoning is not None else ""
    return head + text


def function_tool(
    name: str,
    description: str | None = None,
    required: tuple[str, ...] | None = None,
    **properties: str | dict,
) -> dict:
    """{"type": "function", ...} with a JSON type (or a whole schema) per parameter:
    function_tool("grep", "search", required=("pattern",), pattern="string",
    paths={"type": "array", "items": {"type": "string"}})."""
    parameters: dict = {
        "type": "object",
        "properties": {k: t if isinstance(t, dict) else {"type": t} for k, t in properties.items()},
    }
    if required is not None:
        parameters["required"] = list(required)
    function: dict = {"name": name}
    if description is not None:
        function["description"] = description
    function["parameters"] = parameters
    return {"type": "function", "function": function}
