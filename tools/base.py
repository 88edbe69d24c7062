"""The tool protocol: name, description, pydantic Args (-> JSON schema), run(args, ctx).

Tools are synchronous; the agent runs them in a worker thread. A long tool polls
`ctx.cancel` (a threading.Event) so an interrupt stops it cleanly.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel


@dataclass(frozen=True, slots=True)
class ToolResult:
    output: str
    is_error: bool = False
    # Structured extras for front ends: "diff" (unified diff text), "exit_code", "truncated",
    # "paths_changed" (list[str]), "blocked_by" (sandbox layer) ...
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ToolContext:
    cwd: Path  # the workspace root; relative paths resolve against it
    cancel: threading.Event = field(default_factory=threading.Event)
    # The sandbox policy and runner live in tools/sandbox; kept as Any here so base has no cycle.
    sandbox: Any = None
    timeout_s: float = 120.0
    env: dict[str, str] | None = None


class Tool:
    """Subclass with a pydantic `Args` model and `run`. Class attributes describe it."""

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]
    mutates: ClassVar[bool] = False  # writes files or runs commands (approvals, checkpoints)

    def run(self, args: BaseModel, ctx: ToolContext) -> ToolResult:  # pragma: no cover
        raise NotImplementedError

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The OpenAI tool object for this tool."""
        params = cls.Args.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            prop.pop("title", None)
        return {
            "type": "function",
            "function": {"name": cls.name, "description": cls.description, "parameters": params},
        }
