"""The tool contract: name, description, pydantic Args (-> JSON schema), run(args, ctx), and
what a call would do before it runs: `mutates`, `touches(args)` (the paths it reads and
writes) and `preview(args, ctx)` (the diff, command or request it would make). Approvals and
the sandbox precheck read these; no table elsewhere repeats which tool touches what.

Tools are synchronous; the agent runs them in a worker thread. A long tool polls
`ctx.cancel` (a threading.Event) so an interrupt stops it cleanly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar, get_args, get_origin

from pydantic import BaseModel

if TYPE_CHECKING:  # types only: base stays a leaf that the sandbox package may import
    from .sandbox.policy import SandboxPolicy
    from .sandbox.runner import Sandbox


class ToolOutcome(StrEnum):
    """How a call ended that did not simply run: each is a flag in its result's metadata
    (`{ToolOutcome.DENIED: True}`, written `{"denied": true}`), which front ends show."""

    DENIED = "denied"  # an approval rule, a hook or the user refused it
    SKIPPED = "skipped"  # never started: a limit, or an interrupt before its turn
    INTERRUPTED = "interrupted"  # stopped by the user while it ran


class Blocker(StrEnum):
    """What refused a call before it ran, in its result's metadata as `blocked_by` (the tool
    card says "blocked by ...")."""

    PATH_GUARD = "path_guard"  # a path outside what the editor or the sandbox allows
    NO_SANDBOX = "no_sandbox"  # commands need a sandbox and none could be had
    SANDBOX_FAILED = "sandbox_failed"  # the sandbox did not start
    WRITE_BUDGET = "write_budget"  # the session's write budget is spent
    WEB_FETCH = "web_fetch"  # the fetch policy refused the address


@dataclass(frozen=True, slots=True)
class ToolResult:
    output: str
    is_error: bool = False
    # Structured extras for front ends: "diff" (unified diff text), "exit_code", "truncated",
    # "paths_changed" (list[str]), "blocked_by" (a Blocker), a ToolOutcome flag ...
    metadata: dict[str, Any] = field(default_factory=dict)
    # Images the model sees inside the result: (kind, absolute path, character offset of the
    # placeholder in `output`), offsets non-decreasing (the chat template renders them there).
    media: tuple[tuple[str, str, int], ...] = ()


class Capability(StrEnum):
    """What a tool does, whatever it is named: the unit approval rules and permission modes
    are matched through (agent/approvals.py), so a rule about reading covers every tool that
    reads and plan mode stops every tool that writes, runs or reaches a server."""

    READ = "read"  # reads or lists workspace files (read_file, grep, glob, list_dir)
    WRITE = "write"  # changes files (write_file, edit_file, apply_patch)
    EXEC = "exec"  # runs commands (shell)
    MCP = "mcp"  # reaches an MCP server (its tools, its resources): Touches.server says which
    NETWORK = "network"  # fetches from the network (web_fetch: its rules name domains)
    OTHER = "other"  # none of these (update_plan, shell_output; task, whose children's calls
    # are gated)


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

    def to_dict(self) -> dict[str, str | bool]:
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
    server: str | None = None  # the MCP server the call reaches (its tool or its resources)


class ToolContext:
    """What one call runs with. `sandbox` is always a Sandbox: the session's, or for a context
    made without one (a test, a preview outside a session) the default policy's
    (workspace-write on `cwd`), built on first use and kept, since probing its layers costs a
    process or two. `policy` is the sandbox's policy, read without building one."""

    __slots__ = ("cwd", "cancel", "timeout_s", "env", "call_id", "hidden", "_sandbox")

    def __init__(
        self,
        cwd: Path,  # the workspace root; relative paths resolve against it
        cancel: threading.Event | None = None,
        sandbox: Sandbox | None = None,
        timeout_s: float = 120.0,
        env: dict[str, str] | None = None,
        call_id: str = "",  # the model's id of this call (the task tool nests events under it)
        # paths a rule keeps from the model (the approval gate's `hides`): searches over a
        # directory above them leave them out; None: none
        hidden: Callable[[str], bool] | None = None,
    ) -> None:
        self.cwd = cwd
        self.hidden = hidden
        self.cancel = cancel if cancel is not None else threading.Event()
        self._sandbox = sandbox
        self.timeout_s = timeout_s
        self.env = env
        self.call_id = call_id

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            from .sandbox.policy import SandboxPolicy
            from .sandbox.runner import Sandbox

            self._sandbox = Sandbox(SandboxPolicy(workspace=self.cwd))
        return self._sandbox

    @property
    def policy(self) -> SandboxPolicy:
        if self._sandbox is not None:
            return self._sandbox.policy
        from .sandbox.policy import SandboxPolicy

        return SandboxPolicy(workspace=self.cwd)

    def __repr__(self) -> str:
        return f"ToolContext(cwd={self.cwd!r}, call_id={self.call_id!r})"


ArgsT = TypeVar("ArgsT", bound=BaseModel)


class Tool(Generic[ArgsT]):
    """Subclass with a pydantic `Args` model and `run`. A tool is an instance, and its
    attributes describe it: a built-in tool gives them in its class body (the defaults of
    every instance), an MCP tool sets them per instance from what its server listed.
    `touches` and `preview` say what a call would do (override both in a tool with paths).
    The type argument is the `Args` model (`class EditFile(Tool[EditFileArgs])`), so `run`,
    `touches` and `preview` take it typed, and `Args` is that model unless the class body says
    otherwise; the registry holds `Tool[Any]`, since it validates each call's arguments with
    that tool's own `Args` before handing them over."""

    name: str
    description: str
    Args: type[BaseModel]
    mutates: bool = False  # writes files or runs commands (approvals, checkpoints)
    # What kind of action it is, in the Agent Client Protocol's words (read, edit, delete,
    # move, search, execute, think, fetch, other): how an editor shows its calls.
    kind: str = "other"
    risky: bool = False  # ask first even inside the sandbox (on-request policy)
    concurrent: bool = False  # calls of one reply may run side by side (the task tool)
    # Claude Code's tool names that stand for this one in a rule (`Edit(src/**)`)
    claude_names: tuple[str, ...] = ()
    takes_paths: bool = True  # a rule may name paths (the shell's rules are command prefixes)
    capability: Capability = Capability.OTHER  # what rules and modes match it as

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "Args" in cls.__dict__:
            return
        for base in getattr(cls, "__orig_bases__", ()):  # `Tool[EditFileArgs]` as written
            if get_origin(base) is Tool:
                (model,) = get_args(base)
                if isinstance(model, type) and issubclass(model, BaseModel):
                    cls.Args = model
                return

    def run(self, args: ArgsT, ctx: ToolContext) -> ToolResult:  # pragma: no cover
        raise NotImplementedError

    def touches(self, args: ArgsT) -> Touches:
        """The paths `args` name. A tool that cannot say declares itself opaque."""
        return Touches(opaque=True)

    def preview(self, args: ArgsT, ctx: ToolContext) -> Preview | None:
        """What `run(args, ctx)` would do, without doing it (no write, no command, no
        request). None: nothing to show beyond the arguments."""
        return None

    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments (from `Args`; an MCP tool: its server's)."""
        params = self.Args.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            prop.pop("title", None)
        return params

    def schema(self) -> dict[str, Any]:
        """The OpenAI tool object for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters(),
            },
        }
