"""Prefill progress of one engine call, as Progress events: only when the prefill is slow.

A prompt that is computed in well under a second would only flicker; so the first report goes
out once the prefill has run SHOW_AFTER_S, or its first chunk says it will take that long,
and the final one ("done") only when an earlier one was shown. Rate and time left come from
the engine's own figures (engine.api.PrefillProgress), not from this process's clock.
"""

from __future__ import annotations

from m3agent.engine.api import PrefillProgress

from .events import Progress, ProgressStage

SHOW_AFTER_S = 1.0


class PrefillReporter:
    def __init__(self) -> None:
        self.shown = False

    def report(self, p: PrefillProgress) -> Progress | None:
        final = p.computed_tokens >= p.prompt_tokens
        eta = p.eta_s
        if final:
            if not self.shown:
                return None
            rate = p.tokens_per_s
            speed = f" ({rate:,.0f} tok/s)" if rate else ""
            message = f"prefill done: {p.prompt_tokens:,} tokens in {p.elapsed_s:.1f} s{speed}"
        else:
            if not self.shown and p.elapsed_s + (eta or 0.0) < SHOW_AFTER_S:
                return None
            message = prefill_line(p)
        self.shown = True
        return Progress(
            stage=ProgressStage.PREFILL,
            message=message,
            done=p.computed_tokens,
            total=p.prompt_tokens,
            unit="tokens",
            final=final,
        )


def prefill_line(p: PrefillProgress) -> str:
    """`prefill 6,144/20,000 tokens 30% · 1,530 tok/s · ~9 s left` (short: a status bar)"""
    pct = 100 * p.computed_tokens // max(1, p.prompt_tokens)
    parts = [f"prefill {p.computed_tokens:,}/{p.prompt_tokens:,} tokens {pct}%"]
    rate, eta = p.tokens_per_s, p.eta_s
    if rate:
        parts.append(f"{rate:,.0f} tok/s")
    if eta is not None:
        parts.append(f"~{eta:.0f} s left" if eta >= 1 else "<1 s left")
    if p.cached_tokens:
        parts.append(f"{p.cached_tokens:,} cached")
    return " · ".join(parts)
