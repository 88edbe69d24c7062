"""What a session is built with beyond its engine, tools and config: Session's keywords as
one typed record, so a front end's factory can assemble them in parts (the sandbox and the
saved rules here, the repository snapshot there) and mypy still checks every name and type
that reaches `Session.create` / `Session.resume`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from m3agent.engine.api import Message
    from m3agent.tools.diagnostics import Diagnostics
    from m3agent.tools.sandbox.runner import Sandbox

    from . import events as ev
    from .approvals import ApprovalGate
    from .hooks.dispatch import Hooks
    from .turn_state import CheckpointStore


class SessionOptions(TypedDict, total=False):
    sandbox: Sandbox | None
    checkpoints: CheckpointStore | None
    tool_env: dict[str, str] | None
    # snapshot_builder(progress): a fresh snapshot; progress gets its Progress events.
    snapshot_builder: Callable[[Callable[[ev.Progress], None]], Message] | None
    startup_events: Sequence[ev.Event]
    auto_compact_tokens: int | None
    persist_allow: Callable[[str], None] | None
    # shell prefixes allowed from the start (saved ones), and where a saved answer goes
    shell_prefixes: Sequence[tuple[str, ...]]
    persist_prefix: Callable[[tuple[str, ...]], None] | None
    hooks: Hooks | None  # trust already applied by the front end
    subagent: bool
    gate: ApprovalGate | None  # a task child's: its parent's, mode and all
    diagnostics: Diagnostics | None  # a checker run after each file change
    # What the front end adds to this session (app/extensions.py: its commands), kept for as
    # long as the session lives; the agent never reads it.
    extensions: object | None
