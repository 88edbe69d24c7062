"""The tool schemas and M3 markup builders of the vLLM conformance cases
(vllm_conformance_cases.py), and the Case record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from m3agent.engine.m3.tokens import NS


def _tool(name: str, props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    params = {"type": "object", "properties": props, **extra}
    return {"type": "function", "function": {"name": name, "parameters": params}}


TOOLS = [
    _tool(
        "run_shell",
        {
            "command": {"type": "string"},
            "timeout": {"type": "integer"},
            "background": {"type": "boolean"},
        },
    ),
    _tool(
        "read_file",
        {
            "path": {"type": "string"},
            "lines": {"type": "array", "items": {"type": "integer"}},
            "opts": {"type": "object"},
        },
    ),
    _tool(
        "set_limit",
        {
            "limit": {"type": "integer"},
            "label": {"type": ["string", "null"]},
            "ratio": {"type": "number"},
            "free": {"anyOf": [{"type": "integer"}, {"description": "anything"}]},
            "alias": {"type": "int"},
            "flag": {"type": "Boolean"},
            "both": {"type": ["object", "array"]},
            "all_of": {"allOf": [{"type": "array", "items": {"type": "integer"}}]},
            "tags": {"type": ["array", "string"]},
        },
    ),
    _tool(
        "configure",
        {"env": {"type": "object", "additionalProperties": {"type": "integer"}}},
        additionalProperties={"type": "integer"},
    ),
]


def inv(header: str, body: str) -> str:
    return f"{NS}<invoke {header}>{body}{NS}</invoke>"


def block(*invokes: str) -> str:
    return f"{NS}<tool_call>\n" + "\n".join(invokes) + f"\n{NS}</tool_call>"


def el(name: str, value: str) -> str:
    return f"{NS}<{name}>{value}{NS}</{name}>"


SHELL = block(inv('name="run_shell"', el("command", "ls") + el("timeout", "30")))


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    expected: tuple[str | None, str | None, list[tuple[str, dict[str, Any]]]]
    tools: tuple[dict[str, Any], ...] = tuple(TOOLS)
    tool_choice: Any = None
    mode: str = "adaptive"


def call_case(name: str, body: str, **kw: Any) -> Case:
    """A one-invoke block with a typed result (expected arguments in `args`)."""
    return Case(
        kw.pop("id"),
        block(inv(f'name="{name}"', body)),
        (None, None, [(name, kw.pop("args"))]),
        **kw,
    )
