"""Asked once: `workspace-write` on a machine where bubblewrap cannot run.

Without bubblewrap, Landlock and seccomp still confine writes, reads and sockets, but the kernel
gives no way to refuse chmod/utime on files outside the writable roots (docs/sandbox.md,
`m3agent doctor` names the gap). The user accepts that once per machine; the answer is kept
in the data dir. Headless without a terminal, the run stops with a one-line error instead,
unless `--accept-sandbox-gaps` (or `accept_sandbox_gaps = true` in the config) says yes.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from m3agent.tools.private_fs import open_private, private_dir
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxMode, SandboxPolicy
from m3agent.tools.sandbox.report import SandboxReport

if TYPE_CHECKING:
    from .settings import Settings

GAP = "metadata-without-bwrap"
INSTALL = "sudo apt-get install bubblewrap"


def _why_not(report: SandboxReport) -> str:
    """Why bubblewrap is not used, with the install command when it is missing."""
    if shutil.which("bwrap") is None:
        return f"bubblewrap is not installed ({INSTALL})"
    return f"bubblewrap cannot run here ({report.layer(SandboxLayer.BWRAP).detail})"


def question(report: SandboxReport) -> str:
    return (
        f"{_why_not(report)}: sandboxed commands can still change the permissions and timestamps "
        "of files outside the workspace (nothing else). Accept this on this machine? [y/N] "
    )


class ConsentRefused(Exception):
    """The sandbox gap was not accepted: the session must not start."""


def _store(home: Path) -> Path:
    return home / "sandbox-consent.json"


def accepted(home: Path) -> bool:
    try:
        return GAP in json.loads(_store(home).read_text()).get("accepted", [])
    except (OSError, ValueError, AttributeError):
        return False


def needs_consent(policy: SandboxPolicy, report: SandboxReport) -> bool:
    if policy.mode is not SandboxMode.WORKSPACE_WRITE or policy.dangerously_no_sandbox:
        return False
    return report.protective and not report.is_active(SandboxLayer.BWRAP)


def ensure_consent(
    policy: SandboxPolicy,
    report: SandboxReport,
    home: Path,
    *,
    accept_flag: bool,
    ask: Callable[[str], str] | None,
) -> None:
    """Returns when the session may start; ConsentRefused (one line) otherwise. `ask` is None
    without a terminal."""
    if accept_flag or not needs_consent(policy, report) or accepted(home):
        return
    if ask is None:
        raise ConsentRefused(
            f"{_why_not(report)}, so sandboxed commands could change permissions and timestamps "
            "outside the workspace; install it, accept once in a terminal, or pass "
            "--accept-sandbox-gaps (m3agent doctor shows the gaps)"
        )
    if ask(question(report)).strip().lower() not in ("y", "yes"):
        raise ConsentRefused(
            f"not accepted: run with --sandbox read-only, or install bubblewrap ({INSTALL})"
        )
    private_dir(home)
    fd = open_private(_store(home), os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({"accepted": [GAP]}) + "\n")


def _ask_on_terminal(text: str) -> str:
    sys.stderr.write(text)
    sys.stderr.flush()
    return sys.stdin.readline()


def consent_for(settings: Settings, cwd: Path) -> None:
    """The check for a session about to start in `cwd` (run and the TUI)."""
    from .factory import build_sandbox

    tty = sys.stdin.isatty() and sys.stderr.isatty()
    sandbox = build_sandbox(settings, cwd)
    ensure_consent(
        sandbox.policy,
        sandbox.report,
        settings.home,
        accept_flag=settings.accept_sandbox_gaps,
        ask=_ask_on_terminal if tty else None,
    )
