"""Cache accounting per engine request: prompt, cached and recomputed tokens, and why a miss.

The engine reports how many prompt tokens it found cached. The session knows what it did to the
prompt (a compaction, a fresh snapshot, a resumed session on a new engine), so it can say why a
request missed. A request "misses" when fewer tokens were cached than the whole 128-token pages of
the previous request's prompt: with an append-only prompt those pages are always reusable.
"""

from __future__ import annotations

from dataclasses import replace

from m3agent.engine.api import Usage

PAGE_TOKENS = 128
FIRST_REQUEST = "first request"
ENGINE_RESTARTED = "engine restarted"
COMPACTION = "compaction"
SNAPSHOT_REFRESHED = "snapshot refreshed"
THINKING_DEFAULT_CHANGED = "session thinking mode changed"
REWOUND = "rewound to an earlier turn"
UNKNOWN = "unknown (evicted, or the prompt changed)"


class CacheTracker:
    """Owned by one Session; the loop passes every engine Usage through `annotate`."""

    def __init__(
        self,
        *,
        resumed: bool = False,
        auto_compact_tokens: int | None = None,
        last_sequence_tokens: int | None = None,
    ):
        """`last_sequence_tokens`: on a resumed session, the prompt + generated tokens of the
        log's last request: the pages a warm engine may still hold (a hit on them is no miss)."""
        if auto_compact_tokens is not None and auto_compact_tokens < 1:
            raise ValueError(f"auto_compact_tokens must be positive, got {auto_compact_tokens}")
        self._pending: str | None = ENGINE_RESTARTED if resumed else FIRST_REQUEST
        self._last_prompt: int | None = last_sequence_tokens if resumed else None
        self.last_total_tokens: int | None = None  # prompt + generated of the last request
        self.auto_compact_tokens = auto_compact_tokens
        self.history: list[Usage] = []

    def note(self, reason: str) -> None:
        """The next request will miss, and this is why (a compaction, a refresh)."""
        self._pending = reason
        self.last_total_tokens = None  # the conversation just shrank: no auto-compaction yet

    def annotate(self, usage: Usage) -> Usage:
        expected = (self._last_prompt or 0) // PAGE_TOKENS * PAGE_TOKENS
        if self._last_prompt is None:
            # Nothing sent yet: every whole page but the last token's is a miss.
            expected = max(0, (usage.prompt_tokens - 1) // PAGE_TOKENS * PAGE_TOKENS)
        missed = usage.cached_prompt_tokens < min(expected, usage.prompt_tokens - 1)
        reason = usage.cache_miss_reason
        if missed and reason is None:
            reason = self._pending or UNKNOWN
        elif not missed:
            reason = None
        self._pending = None
        self._last_prompt = usage.prompt_tokens
        self.last_total_tokens = usage.prompt_tokens + usage.generated_tokens
        out = replace(usage, cache_miss_reason=reason)
        self.history.append(out)
        return out

    def wants_compaction(self) -> bool:
        limit = self.auto_compact_tokens
        return limit is not None and (self.last_total_tokens or 0) >= limit
