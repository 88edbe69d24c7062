"""What one running turn shares with its Session: how it was stopped and its pending approvals."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from m3agent.agent.approvals import ApprovalGate
from m3agent.agent.config import AgentConfig
from m3agent.agent.conversation import Conversation

Emit = Callable[[Any], Awaitable[None]]


@dataclass(slots=True)
class TurnControl:
    """Mutable, owned by the Session; the loop reads `stop_reason` after a cancellation."""

    stop_reason: str | None = None  # "interrupted" | "timeout"
    approvals: dict[str, asyncio.Future] = field(default_factory=dict)
    tool_cancel: threading.Event | None = None  # the running tool's ctx.cancel


@dataclass(slots=True)
class LoopDeps:
    """Everything run_turn needs, passed explicitly (no globals)."""

    engine: Any  # m3agent.engine.api.Engine
    toolset: Any  # m3agent.tools.toolset.Toolset (schemas / dispatch / get)
    conversation: Conversation
    config: AgentConfig
    gate: ApprovalGate
    cwd: Path
    emit: Emit
    sandbox: Any = None  # put into ToolContext.sandbox; asked by approvals
    checkpoint: Callable[[str], Any] | None = None  # snapshot(label) before the first mutation
    tool_env: dict[str, str] | None = None
    cache: Any = None  # context_cache.CacheTracker: annotates each Usage with a miss reason
