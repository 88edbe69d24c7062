"""The status bar's figures, kept as a value so the rendering is a pure function (tested)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypedDict

from m3agent.engine.api import EngineInfo, Usage

if TYPE_CHECKING:
    from m3agent.tools.sandbox.policy import SandboxLayer

    from .ports import SessionLike


@dataclass(frozen=True, slots=True)
class StatusState:
    engine: str = ""
    model: str = ""
    state: str = "starting"  # "starting" | "loading" | "ready" | "working" | "failed"
    context_used: int | None = None
    context_max: int | None = None
    cached_tokens: int | None = None
    cache_hit_pct: float | None = None
    cache_miss: str | None = None  # why the last call missed the prefix cache (agent/prompt_cache)
    # of cached_tokens, by where they came from: "from host memory", "from disk" (native)
    cache_sources: tuple[tuple[int, str], ...] = ()
    tokens_per_s: float | None = None
    thinking: str = "adaptive"
    mode: str = ""  # a permission mode other than default: "plan", "accept edits"
    sandbox: str = ""
    sandbox_layers: tuple[SandboxLayer, ...] = ()
    prefill: str | None = None  # a slow prefill's progress line (agent/prefill_progress.py)

    def changed(self, changes: StatusChanges) -> StatusState:
        return replace(self, **changes)

    def with_usage(self, usage: Usage) -> StatusState:
        """The last engine call's figures: context held, cache hit, decode speed."""
        used = usage.prompt_tokens + usage.generated_tokens
        hit = (
            100.0 * usage.cached_prompt_tokens / usage.prompt_tokens if usage.prompt_tokens else 0.0
        )
        tps = self.tokens_per_s
        if usage.total_time_s is not None and usage.generated_tokens:
            # Decode speed: time after the first token, so a long prefill does not hide it.
            decode_s = usage.total_time_s - (usage.time_to_first_token_s or 0.0)
            if decode_s > 0:
                tps = usage.generated_tokens / decode_s
        return replace(
            self,
            context_used=used,
            cached_tokens=usage.cached_prompt_tokens,
            cache_sources=tuple(usage.prefix_sources()),
            cache_hit_pct=hit,
            # A cold first request is expected; any other miss is worth a word.
            cache_miss=None
            if usage.cache_miss_reason == "first request"
            else usage.cache_miss_reason,
            tokens_per_s=tps,
        )

    def render(self) -> str:
        model = "" if self.model in ("", self.engine) else f" {self.model}"
        parts = [f"{self.engine or '?'}{model}"]
        if self.state != "ready":
            parts.append(self.state)
        ctx = "ctx -" if self.context_used is None else f"ctx {_k(self.context_used)}"
        if self.context_max:
            ctx += f"/{_k(self.context_max)}"
        parts.append(ctx)
        if self.cached_tokens is not None and self.cache_hit_pct is not None:
            miss = f" (miss: {self.cache_miss})" if self.cache_miss else ""
            if self.cache_sources and not miss:
                miss = " (" + ", ".join(f"{_k(n)} {src}" for n, src in self.cache_sources) + ")"
            parts.append(f"cached {_k(self.cached_tokens)} {self.cache_hit_pct:.0f}%{miss}")
        else:
            parts.append("cached -")
        if self.prefill and self.state == "working":  # the prompt is still being computed
            parts.append(self.prefill)
        elif self.tokens_per_s:
            parts.append(f"{self.tokens_per_s:.1f} tok/s")
        else:  # measured at the end of a call: while the first one runs, say so, not "-"
            parts.append("… tok/s" if self.state == "working" else "- tok/s")
        if self.mode:
            parts.append(self.mode)
        parts.append(f"think {self.thinking}")
        shown = self.sandbox_layers[:3]  # the confining layers come first in the report
        more = len(self.sandbox_layers) - len(shown)
        layers = "+".join(shown) + (f" +{more}" if more > 0 else "") if shown else "no layers"
        parts.append(f"{self.sandbox or 'sandbox ?'} ({layers})")
        return " │ ".join(parts)


def _k(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 10_000 else str(n)


class StatusChanges(TypedDict, total=False):
    """Some of StatusState's fields, by name: what MainScreen.set_status takes."""

    engine: str
    model: str
    state: str
    context_used: int | None
    context_max: int | None
    cached_tokens: int | None
    cache_hit_pct: float | None
    cache_miss: str | None
    cache_sources: tuple[tuple[int, str], ...]
    tokens_per_s: float | None
    thinking: str
    mode: str
    sandbox: str
    sandbox_layers: tuple[SandboxLayer, ...]
    prefill: str | None


def usage_fields(state: StatusState) -> StatusChanges:
    return {
        "context_used": state.context_used,
        "cached_tokens": state.cached_tokens,
        "cache_sources": state.cache_sources,
        "cache_hit_pct": state.cache_hit_pct,
        "tokens_per_s": state.tokens_per_s,
    }


def engine_label(configured: str, backend: str) -> str:
    """What runs the model, in the user's words: a native model reached through the background
    `m3agent serve` is "native (serve)", not the "remote" backend that talks to it."""
    if backend == "remote" and configured in ("native", "vllm"):
        return f"{configured} (serve)"
    return backend


def engine_info(session: SessionLike) -> EngineInfo | None:
    """The engine's EngineInfo, for the status bar; None when the engine cannot say."""
    try:
        return session.engine.info()
    except Exception:
        return None
