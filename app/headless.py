"""Headless front end: renders Session events as text, one JSON object, or stream-json.

- text:        the answer on stdout; progress (tool calls, errors, usage) on stderr;
- json:        one object at the end: answer, session_id, reason, usage (with cached tokens),
               turns (engine calls), tool_calls, errors;
- stream-json: one JSON object per event and line, {"v": 1, "type": ..., ...}
               (schema in docs/cli.md).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from m3agent.agent import events as ev
from m3agent.agent import ops
from m3agent.tools.out_file import write_out

from . import exit_codes
from .context_notice import describe_context_event
from .headless_approvals import Approver
from .headless_result import claude_fields
from .progress_line import ProgressLine
from .run_input import check_answer
from .safe_text import SafeStream, dumps, short_json, visible

if TYPE_CHECKING:
    from m3agent.agent.session import Session
    from m3agent.engine.api import Usage


OUTPUT_FORMATS = ("text", "json", "stream-json")

_LIMIT_REASONS = ("max_turns", "max_tool_calls", "timeout")
# The approval prompt shows the head of the tool's preview (a terminal, not a pager).


class Tally:
    """What every renderer needs to know at the end."""

    def __init__(self) -> None:
        self.session_id = ""
        self.turns = 0
        self.tool_calls = 0
        self.errors: list[dict[str, Any]] = []
        self.complete: ev.TurnComplete | None = None
        self.requests: list[dict[str, Any]] = []  # per engine call: cache figures
        self.context: list[dict[str, Any]] = []  # snapshot / refresh / compact events
        self.started = time.monotonic()
        self.duration_s: float | None = None  # wall time of the whole run, set at the end
        self.structured_output: Any = None  # the answer parsed, with --output-schema
        self.schema_error: str | None = None  # why the answer failed --output-schema

    def see(self, e: ev.Event) -> None:
        if isinstance(e, ev.SessionStarted):
            self.session_id = e.session_id
        elif isinstance(e, ev.ModelRequestFinished):
            self.turns += 1
            self.requests.append(usage_dict(e.usage))
        elif isinstance(e, ev.ContextEvent) and e.action != "checkpoint":
            self.context.append({"action": e.action, **e.detail})
        elif isinstance(e, ev.ToolCallFinished):
            self.tool_calls += 1
        elif isinstance(e, ev.Error):
            self.errors.append({"kind": e.kind, "message": e.message})
        elif isinstance(e, ev.TurnComplete):
            self.complete = e

    def elapsed_s(self) -> float:
        if self.duration_s is not None:
            return self.duration_s
        return round(time.monotonic() - self.started, 3)

    def result_fields(self) -> dict[str, Any]:
        """What a script checks first: did it fail, how long did it take, how many calls."""
        api = sum(r.get("total_time_s") or 0.0 for r in self.requests)
        return {
            "is_error": self.exit_code() != exit_codes.OK,
            "duration_s": self.elapsed_s(),
            "duration_api_s": round(api, 3),
            "turns": self.turns,
        }

    def claude_fields(self) -> dict[str, Any]:
        c = self.complete
        api = sum(r.get("total_time_s") or 0.0 for r in self.requests)
        valid = self.schema_error is None and self.structured_output is not None
        return {
            **claude_fields(
                code=self.exit_code(),
                answer=c.answer if c else "",
                session_id=self.session_id,
                turns=self.turns,
                duration_s=self.elapsed_s(),
                api_s=api,
            ),
            **({"structured_output": self.structured_output} if valid else {}),
        }

    def exit_code(self) -> int:
        c = self.complete
        if c is None:
            return exit_codes.INTERNAL_ERROR
        if c.reason == "done":
            # A done turn whose answer fails --output-schema is a failed run.
            return exit_codes.OK if self.schema_error is None else exit_codes.INTERNAL_ERROR
        if c.reason in _LIMIT_REASONS:
            return exit_codes.TURN_LIMIT
        if c.reason == "interrupted":
            return exit_codes.INTERRUPTED
        if any(err["kind"] == "engine_unavailable" for err in self.errors):
            return exit_codes.ENGINE_UNAVAILABLE
        return exit_codes.INTERNAL_ERROR


def _check_schema(tally: Tally, schema: dict[str, Any], e: ev.TurnComplete) -> None:
    if e.reason != "done":
        return
    tally.structured_output, tally.schema_error = check_answer(schema, e.answer)
    if tally.schema_error is not None:
        tally.errors.append({"kind": "output_schema", "message": tally.schema_error})


def usage_dict(u: Usage) -> dict[str, Any]:
    """Usage as JSON, with the recomputed prompt tokens spelled out."""
    return {**asdict(u), "recomputed_prompt_tokens": u.recomputed_prompt_tokens}


class Renderer(Protocol):
    """How run_headless shows a run: each event as it comes, then the tally at the end."""

    def event(self, e: ev.Event) -> None: ...

    def finish(self, tally: Tally) -> None: ...


class TextRenderer:
    def __init__(self, out: SafeStream, err: SafeStream):
        self.out, self.err = out, err
        self._progress: ProgressLine | None = None

    def event(self, e: ev.Event) -> None:
        w = self.err
        if isinstance(e, ev.Progress):  # a snapshot refresh mid-run: the start-up's line
            if self._progress is None:
                # The raw stream: ProgressLine escapes the text itself, keeps its own \r.
                self._progress = ProgressLine(w.stream)
            self._progress(e)
            return
        if isinstance(e, ev.ToolCallStarted):
            w.write(f"> {e.name} {short_json(e.arguments)}\n")
        elif isinstance(e, ev.ToolCallFinished):
            mark = "error" if e.is_error else "ok"
            first = e.output.strip().splitlines()[0] if e.output.strip() else ""
            # An error's line is its reason (a denial says what to do): kept whole up to a
            # bound; an output's first line is only a glimpse.
            limit = 400 if e.is_error else 100
            w.write(f"  [{mark}] {first[:limit]}{'…' if len(first) > limit else ''}\n")
        elif isinstance(e, ev.Error):
            w.write(f"error: {e.message}\n")
        elif isinstance(e, ev.ContextEvent) and e.action == "checkpoint":
            w.write(f"  (checkpoint {e.detail.get('id', '')})\n")
        elif isinstance(e, ev.ContextEvent):  # snapshot / refresh / compact: never silent
            w.write(f"  ({describe_context_event(e.action, e.detail)})\n")
        w.flush()

    def finish(self, tally: Tally) -> None:
        c = tally.complete
        if c is not None and c.answer:
            self.out.write(c.answer if c.answer.endswith("\n") else c.answer + "\n")
            self.out.flush()
        if c is not None:
            u = c.usage
            self.err.write(
                f"[{c.reason}] session {tally.session_id}: {tally.elapsed_s():.1f} s, "
                f"{tally.turns} model calls, "
                f"{tally.tool_calls} tool calls, {u.prompt_tokens} prompt tokens "
                f"({u.cached_prompt_tokens} cached{_from_disk(u)}), "
                f"{u.generated_tokens} generated\n"
            )
            self.err.flush()


def _from_disk(u: Usage) -> str:
    """ ", N from host memory, M from disk": where the native engine's tiers kept the prefix."""
    return "".join(f", {n} {where}" for n, where in u.prefix_sources())


class JsonRenderer:
    def __init__(self, out: TextIO):
        self.out = out

    def event(self, e: ev.Event) -> None:
        pass

    def finish(self, tally: Tally) -> None:
        self.out.write(dumps(self.result(tally)) + "\n")
        self.out.flush()

    def result(self, tally: Tally) -> dict[str, Any]:
        """The one object printed at the end (`m3agent review` adds its findings to it)."""
        c = tally.complete
        return {
            "v": ev.EVENT_SCHEMA_VERSION,
            **tally.claude_fields(),  # type, subtype, result, num_turns, duration_ms, ...
            "session_id": tally.session_id,
            "reason": c.reason if c else "error",
            "answer": c.answer if c else "",
            "usage": usage_dict(c.usage) if c else None,
            "last_usage": usage_dict(c.last_usage) if c and c.last_usage else None,
            "requests": tally.requests,
            "context": tally.context,
            **tally.result_fields(),
            "tool_calls": tally.tool_calls,
            "errors": tally.errors,
            "exit_code": tally.exit_code(),
        }


class StreamJsonRenderer:
    def __init__(self, out: TextIO, tally: Tally | None = None):
        self.out = out
        self.tally = tally

    def event(self, e: ev.Event) -> None:
        line = {"v": ev.EVENT_SCHEMA_VERSION, **e.to_dict()}
        if isinstance(e, ev.TurnComplete) and self.tally is not None:
            # Fields added within version 1: the same result figures as --output-format json.
            line.update(self.tally.result_fields())
        self.out.write(dumps(line) + "\n")
        self.out.flush()

    def finish(self, tally: Tally) -> None:
        # The last line, as Claude Code's stream-json ends: {"type": "result", ...}.
        c = tally.complete
        line = {
            "v": ev.EVENT_SCHEMA_VERSION,
            **tally.claude_fields(),
            "reason": c.reason if c else "error",
            "answer": c.answer if c else "",
            "usage": usage_dict(c.usage) if c else None,
            **tally.result_fields(),
            "errors": tally.errors,
            "exit_code": tally.exit_code(),
        }
        self.out.write(dumps(line) + "\n")
        self.out.flush()


def make_renderer(
    fmt: str, out: TextIO | None = None, err: TextIO | None = None
) -> TextRenderer | JsonRenderer | StreamJsonRenderer:
    out = out or sys.stdout
    err = err or sys.stderr
    if fmt == "text":
        # Answer, tool output, file names: none of it may drive the terminal (safe_text.py).
        return TextRenderer(SafeStream(out), SafeStream(err))
    if fmt == "json":
        return JsonRenderer(out)
    if fmt == "stream-json":
        return StreamJsonRenderer(out)
    raise ValueError(f"unknown output format {fmt!r} (use one of {', '.join(OUTPUT_FORMATS)})")


async def run_headless(
    session: Session,
    turn: ops.UserTurn,
    renderer: Renderer,
    approver: Approver,
    *,
    last_message_file: Path | None = None,
    more_turns: tuple[ops.UserTurn, ...] = (),
    schema: dict[str, Any] | None = None,
) -> int:
    """Runs one prompt to its end (then `more_turns`, each after the last ended well: a
    stream-json conversation); returns the exit code. `last_message_file` gets the final
    answer as it is (a file, not a terminal: nothing is escaped), as a 0600 file never written
    through a link the model planted (tools/out_file.py). With `schema`, the final
    answer must be JSON valid against it (--output-schema)."""
    tally = Tally()
    if isinstance(renderer, StreamJsonRenderer):
        renderer.tally = tally
    pending = list(more_turns)
    session.submit(turn)
    async for e in session.events():
        tally.see(e)
        if isinstance(e, ev.TurnComplete) and schema is not None and not pending:
            _check_schema(tally, schema, e)
        renderer.event(e)
        if isinstance(e, ev.ApprovalRequest):
            session.submit(await approver(e))
        elif isinstance(e, ev.TurnComplete):
            if pending and e.reason == "done":
                session.submit(pending.pop(0))
            else:
                session.submit(ops.Shutdown())
    await session.close()
    tally.duration_s = tally.elapsed_s()
    renderer.finish(tally)
    if tally.schema_error is not None and isinstance(renderer, TextRenderer):
        renderer.err.write(f"error: {tally.schema_error}\n")
        renderer.err.flush()
    code = tally.exit_code()
    if last_message_file is not None:
        answer = tally.complete.answer if tally.complete is not None else ""
        try:
            write_out(last_message_file, answer, roots=session.model_writable(), replace=True)
        except OSError as e:
            sys.stderr.write(
                f"error: cannot write {visible(str(last_message_file))}: {e.strerror or e}\n"
            )
            return code or exit_codes.INTERNAL_ERROR
    return code
