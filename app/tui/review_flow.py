"""/review in the TUI: the same diff, prompt and findings as `m3agent review`
(agent/review.py). The prompt goes to the model as a turn of this session (shown as the
command typed, not the whole diff); when that turn ends, its answer is read back as findings
and listed as `path:line: [priority] title`."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

from m3agent.agent import events as ev
from m3agent.agent.ops import UserTurn
from m3agent.agent.review import FINDINGS_SCHEMA, Review, ReviewError, ReviewTarget, collect_diff

from ..run_input import check_answer, schema_instruction
from .hosts import ScreenHelper

USAGE = "usage: /review [--base BRANCH | --commit SHA] [INSTRUCTIONS]"


def parse_review(arg: str) -> tuple[ReviewTarget, str]:
    """(what to review, extra instructions) from `/review`'s argument; ReviewError: usage."""
    try:
        words = shlex.split(arg)
    except ValueError as e:
        raise ReviewError(f"{USAGE} ({e})") from None
    base = commit = None
    rest: list[str] = []
    while words:
        word = words.pop(0)
        if word in ("--base", "--commit"):
            if not words:
                raise ReviewError(f"{word} needs a value; {USAGE}")
            if word == "--base":
                base = words.pop(0)
            else:
                commit = words.pop(0)
        elif word == "--uncommitted":
            continue
        elif word.startswith("--") and not rest:
            raise ReviewError(f"unknown option {word}; {USAGE}")
        else:
            rest.append(word)
    return ReviewTarget(base=base, commit=commit), " ".join(rest)


class ReviewFlow(ScreenHelper):
    pending = False  # the next turn to end is a review's: its answer holds the findings

    async def do_review(self, arg: str) -> None:
        c = self.controller
        if c.session is None:
            await self.transcript.error("the engine is still loading", "usage")
            return
        if c.busy or c.queue:
            await self.transcript.error("a turn is running: Esc stops it first", "usage")
            return
        try:
            target, instructions = parse_review(arg)
            diff = await asyncio.to_thread(collect_diff, Path(self.config.cwd), target)
        except ReviewError as e:
            await self.transcript.error(str(e), "usage")
            return
        self.pending = True
        await self.transcript.notice(diff.headline())
        # The prompt as it is: a diff's `@logo.png` is no attachment, and plan mode's note
        # would ask for a plan instead of the findings.
        prompt = diff.prompt(instructions) + schema_instruction(FINDINGS_SCHEMA)
        turn = UserTurn(text=prompt, thinking_mode=c.thinking)
        await self.view.send_turn(turn, shown_as=f"/review {arg}".strip())

    async def after_turn(self, e: ev.TurnComplete) -> bool:
        """The findings of a review's turn; False when the turn was not a review's."""
        if not self.pending:
            return False
        self.pending = False
        if e.reason != "done":
            return True  # interrupted or stopped: its own notice says so
        value, why = check_answer(FINDINGS_SCHEMA, e.answer)
        if why is not None:
            await self.transcript.error(f"review: {why}", "usage")
            return True
        await self.transcript.notice("review findings:\n" + Review.from_answer(value).render())
        return True
