"""How `m3agent review` shows its findings: text (`path:line: [P1] title`, one a finding, on
stdout) or the run's JSON object with `findings` and `summary` added. The model's answer is
JSON checked against agent/review.py's FINDINGS_SCHEMA by run_headless (--output-schema's
path); an answer that fails it is shown as written, and the run exits 1."""

from __future__ import annotations

from typing import Any, TextIO

from m3agent.agent.review import Review

from .headless import JsonRenderer, Tally, TextRenderer
from .safe_text import SafeStream


def review_of(tally: Tally) -> Review | None:
    """The findings, when the answer satisfied the schema."""
    if tally.schema_error is not None or not isinstance(tally.structured_output, dict):
        return None
    return Review.from_answer(tally.structured_output)


class ReviewTextRenderer(TextRenderer):
    def finish(self, tally: Tally) -> None:
        review = review_of(tally)
        if review is None:  # the answer as written; run_headless then says what was wrong
            super().finish(tally)
            return
        self.out.write(review.render() + "\n")
        self.out.flush()
        c = tally.complete
        if c is not None:
            self.err.write(
                f"[{c.reason}] session {tally.session_id}: {tally.elapsed_s():.1f} s, "
                f"{tally.turns} model calls, {tally.tool_calls} tool calls\n"
            )
            self.err.flush()


class ReviewJsonRenderer(JsonRenderer):
    def result(self, tally: Tally) -> dict[str, Any]:
        review = review_of(tally)
        return {
            **super().result(tally),
            "findings": [f.to_dict() for f in review.findings] if review else None,
            "summary": review.summary if review else None,
        }


def review_renderer(fmt: str, out: TextIO, err: TextIO) -> ReviewTextRenderer | ReviewJsonRenderer:
    if fmt == "text":
        return ReviewTextRenderer(SafeStream(out), SafeStream(err))
    if fmt == "json":
        return ReviewJsonRenderer(out)
    raise ValueError(f"unknown output format {fmt!r} (review prints text or json)")
