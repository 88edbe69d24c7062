"""The session controller: what the TUI knows and decides about its session, with no widgets.

It owns the session, the prompts waiting for it, whether a turn runs (and since when, doing
what), and the attachments and thinking mode of the next turn. Screens ask it and render
what it says; the tests drive it without a terminal. Approvals are decided by the session's
gate (agent/approvals.py: command prefixes included); the TUI only asks what the gate asks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from m3agent.agent import events as ev
from m3agent.agent.config import PermissionMode
from m3agent.agent.ops import Interrupt, Op, UserTurn
from m3agent.engine.api import MediaPart, ThinkingMode

from ..jsonl import read_jsonl
from ..notify import Notifier, tty_writer
from ..permission_modes import check_mode, plan_text
from ..prefix_rules import load_prefixes, saved_rules
from ..slash import next_thinking
from .attachments import media_in_prompt, media_part
from .ports import SessionLike, TuiConfig
from .usage_tally import UsageTally


@dataclass(frozen=True, slots=True)
class QueuedTurn:
    turn: UserTurn
    shown: bool  # already in the transcript (sent while idle) or shown when it is sent


class SessionController:
    def __init__(self, config: TuiConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self.session: SessionLike | None = None
        self.failed = False
        self.busy = False
        self.thinking: ThinkingMode = config.thinking
        self.attachments: list[MediaPart] = []
        self.queue: list[QueuedTurn] = []
        self.completed_turns = 0
        self.prompts_sent = 0
        self.turn_started_at: float | None = None
        self.activity = ""  # what the running turn does now: "thinking", "running shell", ...
        self.last_snapshot_detail: dict[str, Any] | None = None  # for /context
        self.snapshot_from_log = False  # that detail was read from a resumed session's log
        self.last_session_id: str | None = None
        self.usage = UsageTally()  # /cost
        self.notifier = Notifier(
            config.notify, config.notify_write or tty_writer, clock=self.clock
        )  # bell / OSC 9 / OSC 777 on approvals and long turns
        # the permission mode chosen here (plan_flow.py), set on each session's gate
        self.mode = PermissionMode.DEFAULT
        self.pending_context: list[str] = []  # `!cmd` outputs, sent with the next prompt
        self.rule_notes: list[str] = []  # an untrusted project settings.json, refused rules
        self.prefix_note: str | None = None  # an untrusted project prefix file (/permissions)

    # ---- the session ---------------------------------------------------------------------

    def attach(self, session: SessionLike) -> None:
        resumed = session.resumed  # first: a broken session object fails here, as it did
        self.session = session
        if self.config.state_dir is not None:
            # the saved prefixes are the gate's (app/factory.py); here only what /permissions
            # says of an untrusted project file
            self.prefix_note = load_prefixes(self.config.state_dir, self.config.cwd)[1]
            self.apply_saved_rules()
        self.apply_mode(self.mode)  # a new session's gate: the mode is set on it afresh
        self.failed = False
        self.last_session_id = session.id
        if resumed:
            self.prompts_sent += 1  # a resumed session is worth resuming again

    def apply_mode(self, mode: str) -> None:
        """A permission mode (plan_flow.py): set through the session gate's one operation
        (ApprovalGate.set_mode), so it binds the session's task children as well."""
        self.mode = check_mode(mode)
        if self.session is not None:
            self.session.gate.set_mode(self.mode)

    def apply_saved_rules(self) -> None:
        """The user's saved path rules and the trusted project's, after the config's own (a
        config deny still wins); again after /permissions changes them or trusts the project."""
        if self.session is None or self.config.state_dir is None:
            return

        saved, self.rule_notes = saved_rules(self.config.state_dir, Path(self.config.cwd))
        self.session.gate.set_saved(tuple(saved))

    def detach(self) -> SessionLike | None:
        session, self.session = self.session, None
        self.busy = False
        self.turn_started_at = None
        return session

    async def submit(self, op: Op) -> None:
        if self.session is not None:
            self.session.submit(op)

    # ---- prompts -------------------------------------------------------------------------

    def make_turn(self, text: str) -> UserTurn:
        """The next UserTurn: attachments, `@image` paths and the thinking mode go with it."""
        # A text-only model: an `@shot.png` stays a mention in the text, never an attachment.
        found = media_in_prompt(text, self.config.cwd) if self.config.media_refusal is None else ()
        media = tuple(self.attachments) + found
        self.attachments.clear()
        text = plan_text(text, self.mode)  # plan mode's instruction rides on the message
        if self.pending_context:  # at the end of the conversation: the cached prefix stays
            text = "\n\n".join([*self.pending_context, text])
            self.pending_context.clear()
        return UserTurn(text=text, media=media, thinking_mode=self.thinking)

    def enqueue(self, turn: UserTurn) -> QueuedTurn:
        """Queues a turn; it is shown at once only when nothing streams (it would land inside
        the running answer otherwise)."""
        queued = QueuedTurn(turn, shown=not self.busy)
        self.queue.append(queued)
        return queued

    @property
    def waiting(self) -> int:
        return sum(1 for q in self.queue if not q.shown)

    def take_next(self) -> QueuedTurn | None:
        """The turn to send now, or None (no session yet, busy, nothing queued)."""
        if self.session is None or self.busy or not self.queue:
            return None
        self.busy = True
        self.turn_started_at = self.clock()
        self.activity = "working"
        self.prompts_sent += 1
        return self.queue.pop(0)

    def drop_queue(self) -> int:
        n = len(self.queue)
        self.queue.clear()
        return n

    async def interrupt(self) -> str | None:
        """Esc: stops the running turn ("interrupted"), else drops waiting prompts ("dropped")."""
        if self.session is not None and self.busy:
            await self.submit(Interrupt())
            return "interrupted"
        if self.drop_queue():
            return "dropped"
        return None

    # ---- the next turn's settings ----------------------------------------------------------

    def set_thinking(self, mode: ThinkingMode) -> None:
        self.thinking = mode

    def cycle_thinking(self) -> ThinkingMode:
        self.thinking = next_thinking(self.thinking)
        return self.thinking

    def attach_file(self, raw: str) -> MediaPart:
        """Checks the file now (exists, an image or video this model reads, within limits):
        ValueError with one line, instead of a failure when the prompt is sent."""
        from m3agent.agent.attachments import AttachmentError, validate_attachments

        if self.config.media_refusal is not None:  # a text-only model: refused now
            raise ValueError(self.config.media_refusal)
        part = media_part(raw, self.config.cwd)
        try:
            (checked,) = validate_attachments([part], cwd=self.config.cwd)
        except AttachmentError as e:
            raise ValueError(str(e)) from None
        self.attachments.append(checked)
        return checked

    # ---- events ----------------------------------------------------------------------------

    def add_context(self, text: str) -> None:
        self.pending_context.append(text)

    def observe(self, e: ev.Event) -> None:
        """Keeps busy state and activity in step with the session's events."""
        self.usage.see(e)
        self.notifier.see(e, self.turn_started_at)  # before TurnComplete clears the start
        if isinstance(e, ev.TurnStarted):
            self.busy = True
            if self.turn_started_at is None:
                self.turn_started_at = self.clock()
            self.activity = "working"
        elif isinstance(e, ev.ReasoningDelta):
            self.activity = "thinking"
        elif isinstance(e, ev.ContentDelta):
            self.activity = "answering"
        elif isinstance(e, ev.ToolCallStarted):
            self.activity = f"running {e.name}"
        elif isinstance(e, ev.ApprovalRequest):
            self.activity = "waiting for your approval"
        elif isinstance(e, ev.ToolCallFinished):
            self.activity = "working"
        elif isinstance(e, ev.TurnComplete):
            self.busy = False
            self.turn_started_at = None
            self.activity = ""
            self.completed_turns += 1
        elif isinstance(e, ev.ContextEvent) and e.action in ("snapshot", "refresh"):
            self.last_snapshot_detail = dict(e.detail)
            self.snapshot_from_log = False
        elif isinstance(e, ev.Error) and e.fatal:
            self.failed = True

    def elapsed_s(self) -> float | None:
        if self.turn_started_at is None:
            return None
        return max(0.0, self.clock() - self.turn_started_at)

    def stream_ended(self, session: SessionLike | None) -> bool:
        """The event stream of `session` ended; False when it is not the current session."""
        if session is not self.session:
            return False
        self.busy = False
        self.turn_started_at = None
        return True

    # ---- approvals -------------------------------------------------------------------------

    @property
    def allowed_prefixes(self) -> list[tuple[str, ...]]:
        """The shell prefixes the session's gate allows (saved and this session's): shown by
        /permissions; the gate alone decides with them."""
        return [] if self.session is None else list(self.session.gate.prefixes.allowed)

    # ---- history and exit ----------------------------------------------------------------

    def tool_errors(self) -> dict[str, bool]:
        """call id -> is_error, from the tool_call_finished events in the session's log (the
        tool messages themselves do not carry the flag)."""
        out: dict[str, bool] = {}
        for event in self._logged_events():
            if event.get("type") == "tool_call_finished":
                out[str(event.get("call_id"))] = bool(event.get("is_error"))
        return out

    def tool_metadata(self) -> dict[str, dict[str, Any]]:
        """call id -> the logged tool_call_finished metadata (interrupted, denied): a resumed
        card then says "interrupted", not "failed"."""
        out: dict[str, dict[str, Any]] = {}
        for event in self._logged_events():
            meta = event.get("metadata")
            if event.get("type") == "tool_call_finished" and isinstance(meta, dict):
                out[str(event.get("call_id"))] = meta
        return out

    def logged_snapshot_detail(self) -> dict[str, Any] | None:
        """The last snapshot (or refresh) ContextEvent of the session's log: /context of a
        resumed session, whose snapshot was taken by an earlier process."""
        detail = None
        for event in self._logged_events():
            if event.get("type") == "context" and event.get("action") in ("snapshot", "refresh"):
                detail = event.get("detail") if isinstance(event.get("detail"), dict) else detail
        return detail

    def _logged_events(self) -> list[dict[str, Any]]:
        if self.session is None:
            return []
        out = []
        for record in read_jsonl(self.session.conversation.path):
            event = record.get("event") if isinstance(record, dict) else None
            if isinstance(event, dict):
                out.append(event)
        return out

    def resume_command(self) -> str | None:
        """What to type to come back, when the session holds a conversation."""
        if self.last_session_id is None or self.prompts_sent == 0:
            return None
        return f"m3agent resume {self.last_session_id}"
