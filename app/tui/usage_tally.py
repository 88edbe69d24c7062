"""/cost and /usage: the session's figures, summed from its events (the controller keeps one
tally per session)."""

from __future__ import annotations

from dataclasses import dataclass, field

from m3agent.agent import events as ev
from m3agent.engine.api import EngineStats, Usage


@dataclass
class UsageTally:
    """The session's figures for /cost: its model calls' totals (ModelRequestFinished, summed
    as an engine sums its requests) and its prompts (TurnComplete)."""

    turns: int = 0
    calls: EngineStats = field(default_factory=EngineStats)
    model_time_s: float = 0.0
    last: Usage | None = None  # the last model call's (the status line's figures, /context)

    def see(self, e: ev.Event) -> None:
        if isinstance(e, ev.ModelRequestFinished):
            self.last = e.usage
            self.calls = self.calls.plus(e.usage)
            self.model_time_s += e.usage.total_time_s or 0.0
        elif isinstance(e, ev.TurnComplete):
            self.turns += 1

    def render(self) -> str:
        c = self.calls
        hit = 100.0 * c.cached_prompt_tokens / c.prompt_tokens if c.prompt_tokens else 0
        return "\n".join(
            [
                f"this session: {self.turns} prompts, {c.requests} model calls",
                f"  prompt tokens: {c.prompt_tokens:,} ({c.cached_prompt_tokens:,} from "
                f"the prefix cache, {hit:.0f}%)",
                f"  generated tokens: {c.generated_tokens:,}",
                f"  model time: {self.model_time_s:.1f} s",
                "  cost: none (a local or self-hosted model; no per-token price)",
            ]
        )

    def prefix_line(self) -> str | None:
        """/context's word on the last call's prompt prefix: how much of it was cached, and
        whether it came from the engine's memory or back from disk (None before any call)."""
        u = self.last
        if u is None or not u.prompt_tokens:
            return None
        line = f"prefix cache (last call): {u.cached_prompt_tokens:,} of {u.prompt_tokens:,}"
        line += " prompt tokens cached"
        if u.host_prompt_tokens:
            line += f", {u.host_prompt_tokens:,} of them kept in host memory (the KV host tier)"
        if u.restored_prompt_tokens:
            line += f", {u.restored_prompt_tokens:,} of them read back from disk"
        elif u.cached_prompt_tokens and not u.host_prompt_tokens:
            line += " in the engine's memory"
        if u.cache_miss_reason:
            line += f" (miss: {u.cache_miss_reason})"
        return line
