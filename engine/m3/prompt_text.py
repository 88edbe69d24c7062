"""The fixed texts of the built-in M3 renderer (engine/m3/m3_render.py).

Two spans are prose that the real template words in MiniMax's own way: the default identity
line of the system block and the thinking instructions. Ours are our own words (the tests
compare the two renderers with both spans replaced by a placeholder). Everything else here is
format: the block layout, the default developer text and the tools section, which the model
was trained to read, so they follow the real template exactly (SPEC §4.8, the reference README).
"""

from __future__ import annotations

from .tokens import (
    INVOKE_END,
    NS,
    THINK_END,
    THINK_START,
    TOOL_CALL_END,
    TOOL_CALL_START,
)

# ---- our own prose -------------------------------------------------------------------------

IDENTITY = "You are MiniMax-M3, a MiniMax model."
THINKING_OPEN = "\n\n<thinking_instructions>\n"
THINKING_CLOSE = "</thinking_instructions>"
# Words, not the marker strings: the turn's opening (the generation prefix) is what tells the
# model whether this turn thinks, and it may differ from the session's line below.
THINKING_RULES = (
    "A turn may open with private reasoning in a think block, and its opening decides: "
    "inside an open block, reason, close it, answer; block already closed, answer at once; "
    "neither, your choice. The opening wins over the session line.\n"
)
MODE_LINES = {
    "enabled": "Session thinking: enabled. Reason before every reply, after tool results too.\n",
    "disabled": "Session thinking: disabled. Reply without reasoning.\n",
    "adaptive": "Session thinking: adaptive. Reason when a step is hard, else reply directly.\n",
}


def thinking_instructions(session_mode: str) -> str:
    """The body between THINKING_OPEN and THINKING_CLOSE for a session's thinking mode."""
    return THINKING_RULES + MODE_LINES[session_mode]


# ---- format (as the real template lays it out) ---------------------------------------------

DEFAULT_DEVELOPER = "You are a helpful assistant."
TOOLS_HEAD = (
    "\n\n# Tools\nYou may call one or more tools to assist with the user query.\n"
    "Here are the tools available in JSONSchema format:\n\n<tools>\n"
)
TOOLS_TAIL = (
    "</tools>\n\nTo call tools, wrap all invocations in a single "
    f"{TOOL_CALL_START}{TOOL_CALL_END} block. Parameter values containing nested objects or "
    "arrays are recursively expanded into XML elements. Example:\n\n"
    f"{TOOL_CALL_START}\n"
    f'{NS}<invoke name="tool-name-1">{NS}<param-1>value-1{NS}</param-1>{NS}<param-2>'
    f"{NS}<item>{NS}<key-a>val-a{NS}</key-a>{NS}<key-b>val-b{NS}</key-b>{NS}</item>"
    f"{NS}</param-2>{INVOKE_END}\n"
    f'{NS}<invoke name="tool-name-2">{NS}<param-1>value-1{NS}</param-1>{INVOKE_END}\n'
    f"{TOOL_CALL_END}"
)

GENERATION_PREFIX = {"enabled": THINK_START, "disabled": THINK_END, "adaptive": ""}
