"""What one running turn shares with its Session: how it was stopped and its pending approvals."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from m3agent.engine.api import Engine

from .approvals import ApprovalGate
from .config import AgentConfig
from .conversation import Conversation
from .events import Event, StopReason
from .ops import ApprovalDecision
from .prompt_cache import CacheTracker

if TYPE_CHECKING:  # types only: the sandbox runner and the tools load when used
    from m3agent.tools.diagnostics import Diagnostics
    from m3agent.tools.sandbox.runner import Sandbox
    from m3agent.tools.toolset import ToolsetProtocol

    from .hooks.dispatch import Hooks

Emit = Callable[[Event], Awaitable[None]]


@dataclass(slots=True)
class TurnControl:
    """Mutable, owned by the Session; the loop reads `stop_reason` after a cancellation."""

    stop_reason: StopReason | None = None  # INTERRUPTED or TIMEOUT
    approvals: dict[str, asyncio.Future[ApprovalDecision]] = field(default_factory=dict)
    tool_cancel: threading.Event | None = None  # the running tool's ctx.cancel


class CheckpointStore(Protocol):
    """Where the workspace is snapshotted before a turn's first mutating call
    (tools/checkpoint.Checkpoints; a front end that restores files reads the same store)."""

    def snapshot(self, label: str) -> object: ...


@dataclass(slots=True)
class LoopDeps:
    """Everything run_turn needs, passed explicitly (no globals)."""

    engine: Engine
    toolset: ToolsetProtocol | None
    conversation: Conversation
    config: AgentConfig
    gate: ApprovalGate
    cwd: Path
    emit: Emit
    sandbox: Sandbox | None = None  # into ToolContext.sandbox; approvals read it
    checkpoints: CheckpointStore | None = None  # a snapshot before the turn's first mutation
    tool_env: dict[str, str] | None = None
    cache: CacheTracker | None = None  # annotates each Usage with a miss reason
    hooks: Hooks | None = None  # the user's (and a trusted project's) hooks
    subagent: bool = False  # a child session (agent/subagents): its Stop is SubagentStop
    # Tools a custom command allowed for this turn (frontmatter allowed-tools): no prompt.
    allowed_tools: frozenset[str] = frozenset()
    # The configured checker, run on the files a call changed; its findings join the result.
    diagnostics: Diagnostics | None = None
