"""How a headless run answers approval requests: on the terminal (stderr, with the tool's
preview of the call), or never (a fixed denial)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TextIO

from m3agent.agent import events as ev
from m3agent.agent import ops
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


def headless_approver(approval: str, home: Path, cwd: Path) -> Approver:
    """The approver of a headless run: none needed with approvals off, the terminal's where
    stdin and stderr are one, else a denial that says why."""
    if approval == "never":
        return deny_approver("approvals are off")  # never called: the gate never asks
    if sys.stdin.isatty() and sys.stderr.isatty():
        return tty_approver(sys.stderr, home=home, cwd=cwd)
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


def tty_approver(
    err: TextIO,
    stdin: TextIO | None = None,
    home: Path | None = None,
    cwd: Path | None = None,
) -> Approver:
    """Asks on the terminal: y = once, n (or anything else) = deny; a = this tool for the
    session and s = always (saved for later sessions too), except for shell, where p allows
    the command's prefix (`pytest`, `git status`) instead of every command
    (app/command_prefix.py decides what a prefix covers)."""
    from .command_prefix import command_prefix, matches, shown

    shown_err = SafeStream(err)  # the arguments and the reason quote the model and the repo
    prefixes: list[tuple[str, ...]] = []
    if home is not None and cwd is not None:  # saved ones (user scope; a trusted project's)
        from .prefix_rules import load_prefixes

        prefixes += load_prefixes(home, cwd)[0]

    async def approve(req: ev.ApprovalRequest) -> ops.ApprovalDecision:
        command = req.arguments.get("command") if req.name == Shell.name else None
        command = command if isinstance(command, str) else None
        if command is not None and any(matches(command, p) for p in prefixes):
            return ops.ApprovalDecision(req.call_id, ops.Decision.APPROVE)
        prefix = command_prefix(command) if command is not None else None
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
            shown_err.write(f" [y]es / [p] always `{shown(prefix)} …` this run{saved} / [N]o: ")
        else:
            shown_err.write(" [y]es / [N]o: ")
        shown_err.flush()
        reader = stdin or sys.stdin
        answer = (await asyncio.to_thread(reader.readline)).strip().lower()
        if answer in ("y", "yes"):
            return ops.ApprovalDecision(req.call_id, ops.Decision.APPROVE)
        if answer in ("a", "always") and req.name != Shell.name:
            return ops.ApprovalDecision(req.call_id, ops.Decision.APPROVE_SESSION)
        if answer in ("s", "save") and req.name != Shell.name:
            return ops.ApprovalDecision(req.call_id, ops.Decision.APPROVE_ALWAYS)
        if answer in ("p", "s") and prefix is not None:
            prefixes.append(prefix)
            if answer == "s" and home is not None:  # for later runs and the TUI too
                from .prefix_rules import save_prefix

                try:
                    save_prefix(home, prefix)
                except OSError as e:
                    shown_err.write(f"(not saved: {e})\n")
            return ops.ApprovalDecision(req.call_id, ops.Decision.APPROVE)
        return ops.ApprovalDecision(req.call_id, ops.Decision.DENY, "the user said no")

    return approve
