"""The two thinking modes a session keeps, and what changing them costs.

Split out of session.py because the modes follow rules of their own, apart from the op/event
protocol: `default` is the mode of a turn that names none, and SetThinking changes it at once;
`system` is the one written in the prompt's system block, which opens the prompt, so changing
it (SetThinking with session_default) is announced first with what the next request will
recompute, and reaches the engine only from the next turn on (`for_turn`). Both are logged as
settings and read back from the log on resume.
"""

from __future__ import annotations

from collections.abc import Callable

from m3agent.engine.api import THINKING_MODES, ThinkingMode

from . import events as ev
from . import ops
from .conversation import Conversation
from .prompt_cache import THINKING_DEFAULT_CHANGED, CacheTracker


def _mode(value: str | None, fallback: ThinkingMode) -> ThinkingMode:
    """A mode read from the session log (a plain string), or `fallback` if it names none."""
    return ThinkingMode(value) if value in THINKING_MODES else fallback


class ThinkingModes:
    """A session's modes. `report` is the session's: it logs an event and hands it on."""

    def __init__(
        self,
        conversation: Conversation,
        fallback: ThinkingMode,
        cache: CacheTracker,
        report: Callable[[ev.Event], None],
    ):
        self._conversation = conversation
        self._cache = cache
        self._report = report
        meta = conversation.meta
        self.default: ThinkingMode = _mode(meta.thinking_default, fallback)
        # Written in the prompt's system block; fixed unless SetThinking(session_default=True).
        self.system: ThinkingMode = _mode(meta.session_thinking_mode, ThinkingMode.ADAPTIVE)
        self._sent = self.system  # the one the engine's cache holds

    def set(self, op: ops.SetThinking) -> None:
        """SetThinking: the default from now on, and the system block's from the next turn
        when `op.session_default`; an unknown mode is a usage error."""
        if op.mode not in THINKING_MODES:
            msg = f"unknown thinking mode {op.mode!r}"
            self._report(ev.Error(message=msg, kind=ev.ErrorKind.USAGE))
            return
        mode = ThinkingMode(op.mode)
        if op.session_default:
            self._set_system(mode)
        self.default = mode
        self._conversation.log_setting(thinking_default=mode)

    def for_turn(self) -> ThinkingMode:
        """The system block's thinking mode for the next turn. A change since the last turn
        (SetThinking with session_default) applies from this turn on, and the cache figures
        say the next request recomputes the prompt."""
        if self._sent != self.system:
            if self._cache.history:
                self._cache.note(THINKING_DEFAULT_CHANGED)
            self._sent = self.system
        return self.system

    def _set_system(self, mode: ThinkingMode) -> None:
        """Rewrites the system block's mode line: says first what the next request recomputes."""
        if mode == self.system:
            return
        # The whole conversation as the engine last saw it (prompt + output); 0 before any.
        last = self._cache.history[-1] if self._cache.history else None
        recompute = self._cache.last_total_tokens or (last.prompt_tokens if last else 0)
        self._report(
            ev.ContextEvent(
                action=ev.ContextAction.THINKING_DEFAULT,
                detail={"mode": mode, "previous": self.system, "recompute_tokens": recompute},
            )
        )
        self.system = mode
        self._conversation.log_setting(session_thinking_mode=mode)
