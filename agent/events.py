"""Events: what a Session emits. The TUI, headless renderers and tests consume only these.

Every event is a frozen dataclass with a `type` tag; `to_dict()` gives the stream-json form
(documented and versioned in docs/cli.md). The streamed text events, ReasoningDelta and
ContentDelta, are the engine's own delta types (engine/api.py): what the engine streams, the
loop passes on as the same type, so each is defined once.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, ClassVar

from m3agent.engine.api import ContentDelta as ContentDelta
from m3agent.engine.api import EngineName, FinishReason, ThinkingMode, Usage
from m3agent.engine.api import ReasoningDelta as ReasoningDelta
from m3agent.tools.base import Preview

from .ops import ApprovalDecision

EVENT_SCHEMA_VERSION = 1


# ---- closed vocabularies (each defined once; a member equals its string, and json.dumps
# writes that string, so the stream-json form is unchanged) ------------------------------


class StopReason(StrEnum):
    """Why a turn ended (TurnComplete.reason)."""

    DONE = "done"  # the model answered without a tool call
    MAX_TURNS = "max_turns"  # the engine-call limit (AgentConfig.max_turns)
    MAX_TOOL_CALLS = "max_tool_calls"
    TIMEOUT = "timeout"  # the turn's wall-time limit
    INTERRUPTED = "interrupted"  # the user stopped it
    ERROR = "error"  # an engine failure or a refused attachment (an Error event says which)
    BLOCKED = "blocked"  # a UserPromptSubmit hook refused the prompt


class ContextAction(StrEnum):
    """What a ContextEvent reports."""

    SNAPSHOT = "snapshot"  # the repository snapshot taken at start
    REFRESH = "refresh"  # compaction with a fresh snapshot
    COMPACT = "compact"  # the conversation tail summarised
    CHECKPOINT = "checkpoint"  # a checkpoint before the turn's first mutation
    INSTRUCTIONS = "instructions"  # AGENTS.md-style instruction files loaded
    THINKING_DEFAULT = "thinking_default"  # the session's default thinking mode changed
    TOOLS = "tools"  # the toolset changed (MCP servers reloaded)
    HOOK = "hook"  # a hook ran
    REPAIR = "repair"  # a resumed log had calls without results; they were closed
    REWIND = "rewind"  # the conversation went back to before an earlier prompt (/rewind)


class ErrorKind(StrEnum):
    """What an Error event is about."""

    ENGINE_UNAVAILABLE = "engine_unavailable"  # the engine cannot be reached or loaded
    ENGINE = "engine"  # the engine failed a request
    TOOL = "tool"  # a tool, MCP server or checkpoint failed outside a tool result
    USAGE = "usage"  # the front end or user asked for something invalid
    HOOK = "hook"  # a hook failed or blocked
    INTERNAL = "internal"  # a bug


@dataclass(frozen=True, slots=True)
class _Event:
    type: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"type": self.type}
        for f in fields(self):
            if f.name.startswith("_"):
                continue
            v = getattr(self, f.name)
            if isinstance(v, Usage):
                v = asdict(v)
            elif isinstance(v, Preview):
                v = v.to_dict()
            d[f.name] = v
        return d


@dataclass(frozen=True, slots=True)
class SessionStarted(_Event):
    type: ClassVar[str] = "session_started"
    session_id: str
    engine: EngineName
    model: str
    cwd: str
    resumed: bool = False


@dataclass(frozen=True, slots=True)
class TurnStarted(_Event):
    type: ClassVar[str] = "turn_started"
    turn: int
    thinking_mode: ThinkingMode


@dataclass(frozen=True, slots=True)
class ToolCallStarted(_Event):
    type: ClassVar[str] = "tool_call_started"
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCallFinished(_Event):
    type: ClassVar[str] = "tool_call_finished"
    call_id: str
    name: str
    output: str
    is_error: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ApprovalRequest(_Event):
    """Asks the front end to approve a call; answer with Session.submit(ApprovalDecision)
    or by setting `future`'s result to an ApprovalDecision. `preview` is the tool's own
    (Tool.preview: the diff, command or request it would make; bounded); `diff` is its text
    when it is a diff, kept for front ends that read only that."""

    type: ClassVar[str] = "approval_request"
    call_id: str
    name: str
    arguments: dict[str, Any]
    diff: str | None = None
    reason: str = ""
    preview: Preview | None = None
    # The command prefix the user may allow from now on (shell; agent/shell_prefixes.py):
    # answered with Decision.APPROVE_PREFIX or APPROVE_PREFIX_ALWAYS. None: nothing to offer.
    amendment: tuple[str, ...] | None = None
    _future: asyncio.Future[ApprovalDecision] | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def future(self) -> asyncio.Future[ApprovalDecision] | None:
        return self._future


@dataclass(frozen=True, slots=True)
class ModelRequestFinished(_Event):
    """One engine call finished: its usage and cache figures."""

    type: ClassVar[str] = "model_request_finished"
    usage: Usage
    finish_reason: FinishReason


@dataclass(frozen=True, slots=True)
class TurnComplete(_Event):
    type: ClassVar[str] = "turn_complete"
    turn: int
    reason: StopReason
    answer: str
    usage: Usage  # summed over the turn's engine calls
    last_usage: Usage | None = None  # the last engine call (cache hit figures)


@dataclass(frozen=True, slots=True)
class ContextEvent(_Event):
    """Snapshot taken / refreshed, compaction done: always reported, never silent."""

    type: ClassVar[str] = "context"
    action: ContextAction
    detail: dict[str, Any] = field(default_factory=dict)


class ProgressStage(StrEnum):
    SNAPSHOT = "snapshot"  # the repository snapshot: files listed, read, tokens counted
    MODEL_LOAD = "model_load"  # weights: bytes loaded of the checkpoint's total
    SERVER = "server"  # the background `m3agent serve` run/TUI use: started, reused, ready
    PREFILL = "prefill"  # the prompt's prefill: tokens computed of the prompt (slow ones only)


@dataclass(frozen=True, slots=True)
class Progress(_Event):
    """How far a long step has got: the repository snapshot (files, tokens), the model load
    (bytes), the background server's start. `message` is one line a UI can show as it is;
    `final` marks the step's last report."""

    type: ClassVar[str] = "progress"
    stage: ProgressStage
    message: str
    done: int = 0
    total: int | None = None  # None: not known (yet)
    unit: str = ""  # "files" | "tokens" | "bytes" | ""
    final: bool = False

    @property
    def fraction(self) -> float | None:
        return min(1.0, self.done / self.total) if self.total else None


@dataclass(frozen=True, slots=True)
class Error(_Event):
    type: ClassVar[str] = "error"
    message: str
    kind: ErrorKind = ErrorKind.INTERNAL
    fatal: bool = False


@dataclass(frozen=True, slots=True)
class PlanUpdate(_Event):
    """The model's checklist (the update_plan tool), whole each time: front ends pin it."""

    type: ClassVar[str] = "plan"
    call_id: str
    plan: list[dict[str, str]]  # [{"step": ..., "status": pending|in_progress|completed}]
    explanation: str = ""


@dataclass(frozen=True, slots=True)
class SubagentEvent(_Event):
    """An event of a child session run by the task tool call `parent_call_id`: front ends
    nest it under that call's card; stream-json prints `event` as the child's own line."""

    type: ClassVar[str] = "subagent"
    parent_call_id: str
    agent: str
    session_id: str
    event: dict[str, Any]


Event = (
    SessionStarted
    | TurnStarted
    | ReasoningDelta
    | ContentDelta
    | ToolCallStarted
    | ToolCallFinished
    | ApprovalRequest
    | ModelRequestFinished
    | TurnComplete
    | ContextEvent
    | Progress
    | Error
    | PlanUpdate
    | SubagentEvent
)
