"""/cost and /usage: the session's figures, summed from its events (the controller keeps one
tally per session)."""

from __future__ import annotations

from dataclasses import dataclass

from m3agent.agent import events as ev


@dataclass
class UsageTally:
    """The session's figures for /cost, summed from its TurnComplete events."""

    turns: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    model_time_s: float = 0.0
    requests: int = 0

    def see(self, e: ev.Event) -> None:
        if isinstance(e, ev.ModelRequestFinished):
            u = e.usage
            self.requests += 1
            self.prompt_tokens += u.prompt_tokens
            self.cached_prompt_tokens += u.cached_prompt_tokens
            self.generated_tokens += u.generated_tokens
            self.model_time_s += u.total_time_s or 0.0
        elif isinstance(e, ev.TurnComplete):
            self.turns += 1

    def render(self) -> str:
        hit = 100.0 * self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0
        return "\n".join(
            [
                f"this session: {self.turns} prompts, {self.requests} model calls",
                f"  prompt tokens: {self.prompt_tokens:,} ({self.cached_prompt_tokens:,} from "
                f"the prefix cache, {hit:.0f}%)",
                f"  generated tokens: {self.generated_tokens:,}",
                f"  model time: {self.model_time_s:.1f} s",
                "  cost: none (a local or self-hosted model; no per-token price)",
            ]
        )
