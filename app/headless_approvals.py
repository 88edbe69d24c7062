"""How a headless run answers approval requests: on the terminal (stderr, with the tool's
preview of the call), or never (a fixed denial). Whether to ask is the session gate's
(agent/approvals.py, saved shell prefixes included): this only asks and returns the answer."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

from m3agent.agent import events as ev
from m3agent.agent import ops
from m3agent.agent.config import ApprovalPolicy
from m3agent.agent.shell_prefixes import describe
from m3agent.tools.base import Preview
from m3agent.tools.bounds import NOT_APPLIED, cut_diff
from m3agent.tools.shell import Shell

from .safe_text import SafeStream, short_json

Approver = Callable[[ev.ApprovalRequest], Awaitable[ops.ApprovalDecision]]
PROMPT_PREVIEW_LINES = 60
PROMPT_PREVIEW_BYTES = 8_000


def deny_approver(note: str) -> Approver:
    async def approve(req: ev.ApprovalRequest) -> ops.ApprovalDecision:
        return ops.ApprovalDecision(req.call_id, ops.Decision.DENY, note)

    return approve


def headless_approver(approval: str, home: Path) -> Approver:
    """The approver of a headless run: none needed with approvals off, the terminal's where
    stdin and stderr are one, else a denial that says why."""
    if ApprovalPolicy(approval) is ApprovalPolicy.NEVER:
        return deny_approver("approvals are off")  # never called: the gate never asks
    if sys.stdin.isatty() and sys.stderr.isatty():
        return tty_approver(sys.stderr, home=home)
    return deny_approver(
        "nobody can approve in headless mode (no terminal); the user may rerun with "
        "--approval never or allow the tool in config"
    )


def prompt_preview(preview: Preview) -> str:
    """The tool's preview as the terminal prompt shows it: its head, and what was cut."""
    text, note = cut_diff(
        preview.text.splitlines(keepends=True),
        PROMPT_PREVIEW_LINES,
        PROMPT_PREVIEW_BYTES,
        NOT_APPLIED,
        str(preview.kind),
    )
    head = "this call would fail: " if preview.is_error else ""
    notes = "".join(f"\n{n}" for n in (note, preview.note) if n)
    return f"{head}{text.rstrip(chr(10))}{notes}\n"


def tty_approver(err: TextIO, stdin: TextIO | None = None, home: Path | None = None) -> Approver:
    """Asks on the terminal: y = once, n (or anything else) = deny; a = this tool for the
    session and s = always (saved for later sessions too), except for shell, where p allows
    the command's prefix (`pytest`, `git status`) instead of every command, and s saves it.
    The session's gate decided that it asks and which prefix it offers (the request's
    amendment; agent/shell_prefixes.py); `home`: saving is offered (the gate saves there)."""
    shown_err = SafeStream(err)  # the arguments and the reason quote the model and the repo

    async def approve(req: ev.ApprovalRequest) -> ops.ApprovalDecision:
        prefix = req.amendment if req.name == Shell.name else None
        # With a preview (the diff, the command) the arguments only repeat it: kept short.
        shown_err.write(
            f"\nApprove {req.name} {short_json(req.arguments, 120 if req.preview else 400)}?"
        )
        if req.reason:
            shown_err.write(f" ({req.reason})")
        if req.preview is not None:
            shown_err.write("\n" + prompt_preview(req.preview))
        if req.name != Shell.name:
            shown_err.write(" [y]es / [a]lways this session / [s]ave always / [N]o: ")
        elif prefix is not None:
            saved = " / [s] always, saved" if home is not None else ""
            shown_err.write(f" [y]es / [p] always `{describe(prefix)}` this run{saved} / [N]o: ")
        else:
            shown_err.write(" [y]es / [N]o: ")
        shown_err.flush()
        reader = stdin or sys.stdin
        answer = (await asyncio.to_thread(reader.readline)).strip().lower()
        return ops.ApprovalDecision(req.call_id, *_decision(answer, req.name, prefix, home))

    return approve


def _decision(
    answer: str, tool: str, prefix: tuple[str, ...] | None, home: Path | None
) -> tuple[ops.Decision, str]:
    """The terminal's answer as a decision for the gate (which keeps what it allows)."""
    if answer in ("y", "yes"):
        return ops.Decision.APPROVE, ""
    if answer in ("a", "always") and tool != Shell.name:
        return ops.Decision.APPROVE_SESSION, ""
    if answer in ("s", "save") and tool != Shell.name:
        return ops.Decision.APPROVE_ALWAYS, ""
    if answer == "p" and prefix is not None:
        return ops.Decision.APPROVE_PREFIX, ""
    if answer == "s" and prefix is not None:  # for later runs and the TUI too
        saved = home is not None
        return (ops.Decision.APPROVE_PREFIX_ALWAYS if saved else ops.Decision.APPROVE_PREFIX), ""
    return ops.Decision.DENY, "the user said no"
