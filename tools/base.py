"""The tool contract: name, description, pydantic Args (-> JSON schema), run(args, ctx), and
what a call would do before it runs: `mutates`, `touches(args)` (the paths it reads and
writes) and `preview(args, ctx)` (the diff, command or request it would make). Approvals and
the sandbox precheck read these; no table elsewhere repeats which tool touches what.

Tools are synchronous; the agent runs them in a worker thread. A long tool polls
`ctx.cancel` (a threading.Event) so an interrupt stops it cleanly.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

if TYPE_CHECKING:  # types only: base stays a leaf that the sandbox package may import
    from .sandbox.runner import Sandbox


class ToolOutcome(StrEnum):
    """How a call ended that did not simply run: each is a flag in its result's metadata
    (`{ToolOutcome.DENIED: True}`, written `{"denied": true}`), which front ends show."""

    DENIED = "denied"  # an approval rule, a hook or the user refused it
    SKIPPED = "skipped"  # never started: a limit, or an interrupt before its turn
    INTERRUPTED = "interrupted"  # stopped by the user while it ran


@dataclass(frozen=True, slots=True)
class ToolResult:
    output: str
    is_error: bool = False
    # Structured extras for front ends: "diff" (unified diff text), "exit_code", "truncated",
    # "paths_changed" (list[str]), "blocked_by" (sandbox layer), a ToolOutcome flag ...
    metadata: dict[str, Any] = field(default_factory=dict)
    # Images the model sees inside the result: (kind, absolute path, character offset of the
    # placeholder in `output`), offsets non-decreasing (the chat template renders them there).
    media: tuple[tuple[str, str, int], ...] = ()


class PreviewKind(StrEnum):
    DIFF = "diff"  # a unified diff: what an edit, write or patch would change
    COMMAND = "command"  # a command line and the directory it runs in
    TEXT = "text"  # anything else (an MCP request; why a call would fail)


@dataclass(frozen=True, slots=True)
class Preview:
    """What a call would do, computed without doing it. `text` is bounded (tools/bounds.py);
    `note` says what was cut ("" when nothing was). `is_error`: the call would fail, and
    `text` says why (the tool reports the same when it runs)."""

    kind: PreviewKind
    text: str
    note: str = ""
    is_error: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "text": self.text,
            "note": self.note,
            "is_error": self.is_error,
        }


@dataclass(frozen=True, slots=True)
class Touches:
    """The paths a call names, as the model wrote them (relative to the workspace or
    absolute). `opaque`: the tool may reach further than it can say before running (a shell
    command, an MCP server); the sandbox layers confine it at run time."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    opaque: bool = False


@dataclass(slots=True)
class ToolContext:
    cwd: Path  # the workspace root; relative paths resolve against it
    cancel: threading.Event = field(default_factory=threading.Event)
    # The session's sandbox (policy, probed layers, runner). None: the default policy
    # (workspace-write on `cwd`), whose Sandbox the shell tool builds on first use.
    sandbox: Sandbox | None = None
    timeout_s: float = 120.0
    env: dict[str, str] | None = None
    call_id: str = ""  # the model's id of this call (the task tool nests events under it)


ArgsT = TypeVar("ArgsT", bound=BaseModel)


class Tool(Generic[ArgsT]):
    """Subclass with a pydantic `Args` model and `run`. Class attributes describe it;
    `touches` and `preview` say what a call would do (override both in a tool with paths).
    The type argument is the `Args` model (`class EditFile(Tool[EditFileArgs])`), so `run`,
    `touches` and `preview` take it typed; the registry holds `Tool[Any]`, since it validates
    each call's arguments with that tool's own `Args` before handing them over."""

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]
    mutates: ClassVar[bool] = False  # writes files or runs commands (approvals, checkpoints)
    # What kind of action it is, in the Agent Client Protocol's words (read, edit, delete,
    # move, search, execute, think, fetch, other): how an editor shows its calls.
    kind: ClassVar[str] = "other"
    risky: ClassVar[bool] = False  # ask first even inside the sandbox (on-request policy)

    def run(self, args: ArgsT, ctx: ToolContext) -> ToolResult:  # pragma: no cover
        raise NotImplementedError

    def touches(self, args: ArgsT) -> Touches:
        """The paths `args` name. A tool that cannot say declares itself opaque."""
        return Touches(opaque=True)

    def preview(self, args: ArgsT, ctx: ToolContext) -> Preview | None:
        """What `run(args, ctx)` would do, without doing it (no write, no command, no
        request). None: nothing to show beyond the arguments."""
        return None

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
