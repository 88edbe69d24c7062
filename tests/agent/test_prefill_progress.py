"""Which prefill reports become Progress events (agent/prefill_progress.py), and how the
headless stderr line throttles them when stderr is a file (app/progress_line.py)."""

from __future__ import annotations

import io

from m3agent.agent.events import ProgressStage
from m3agent.agent.prefill_progress import PrefillReporter
from m3agent.app.progress_line import ProgressLine
from m3agent.engine.api import PrefillProgress


def test_a_quick_prefill_shows_nothing_not_even_its_end():
    r = PrefillReporter()
    assert r.report(PrefillProgress(4096, 2048, 0, 0.2)) is None  # 0.4 s in all: quick
    assert r.report(PrefillProgress(4096, 4096, 0, 0.4)) is None


def test_a_slow_prefill_shows_from_its_first_chunk_and_ends_with_done():
    r = PrefillReporter()
    first = r.report(PrefillProgress(20_000, 2048, 0, 0.5))  # ~4.4 s left by its rate
    assert first is not None and first.stage == ProgressStage.PREFILL and not first.final
    assert first.message == "prefill 2,048/20,000 tokens 10% · 4,096 tok/s · ~4 s left"
    assert (first.done, first.total, first.unit) == (2048, 20_000, "tokens")
    cached = PrefillReporter().report(PrefillProgress(20_000, 10_240, 8_192, 1.0))
    assert cached is not None and cached.message.endswith("· 8,192 cached")
    assert "2,048 tok/s" in cached.message  # computed tokens only: the cached ones are free
    end = r.report(PrefillProgress(20_000, 20_000, 0, 5.0))
    assert end is not None and end.final
    assert end.message == "prefill done: 20,000 tokens in 5.0 s (4,000 tok/s)"


def test_plain_lines_are_throttled_and_the_last_always_written():
    now = [0.0]
    out = io.StringIO()
    line = ProgressLine(out, tty=False, clock=lambda: now[0])
    r = PrefillReporter()
    for t, done in [(1.0, 2048), (2.0, 4096), (4.5, 6144), (5.0, 8192)]:
        now[0] = t
        line(r.report(PrefillProgress(8192, done, 0, t)))
    assert out.getvalue().splitlines() == [
        "m3agent: prefill 2,048/8,192 tokens 25% · 2,048 tok/s · ~3 s left",
        "m3agent: prefill 6,144/8,192 tokens 75% · 1,365 tok/s · ~2 s left",
        "m3agent: prefill done: 8,192 tokens in 5.0 s (1,638 tok/s)",
    ]


def test_on_a_terminal_the_line_is_rewritten_and_the_end_stays():
    out = io.StringIO()
    line = ProgressLine(out, tty=True)
    r = PrefillReporter()
    line(r.report(PrefillProgress(8192, 2048, 0, 1.0)))
    line(r.report(PrefillProgress(8192, 8192, 0, 4.0)))
    text = out.getvalue()
    assert text.startswith("\r\x1b[Kprefill 2,048/8,192") and "\n" not in text.split("done")[0]
    assert text.endswith("\r\x1b[Kprefill done: 8,192 tokens in 4.0 s (2,048 tok/s)\n")
