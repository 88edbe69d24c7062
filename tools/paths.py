"""The one path guard every file tool goes through.

Symlinks and `..` are resolved (os.path.realpath) before any check, so a link inside the
workspace that points outside is judged by where it lands.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .base import ToolContext
from .host_read import refusal
from .sandbox.policy import SandboxMode, SandboxPolicy


class PathDenied(Exception):
    """A path the policy does not allow; the message is shown to the model as is."""


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _is_secret(path: Path, policy: SandboxPolicy) -> bool:
    """The host read policy (tools/host_read.py): system, secret and private locations."""
    return refusal(path, policy) is not None


def is_secret(path: Path, ctx: ToolContext) -> bool:
    """For filtering search results: a resolved path the policy keeps unreadable."""
    try:
        return _is_secret(_realpath(path, str(path)), ctx.policy)
    except PathDenied:
        return True  # changing under the check: kept out, like a secret


def resolve(raw: str, ctx: ToolContext) -> Path:
    """Absolute, symlink-free path for `raw` (relative paths against ctx.cwd). A name shown
    with `\\xNN` escapes (bytes that are not UTF-8, see shown_name) is found by them."""
    if not raw or "\x00" in raw:
        raise PathDenied(f"invalid path {raw!r}")
    p = Path(os.path.expanduser(raw)) if raw.startswith("~") else Path(raw)
    if not p.is_absolute():
        p = Path(ctx.cwd) / p
    if _ESCAPE.search(raw) and not os.path.lexists(p):
        raw_bytes = _ESCAPE.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), str(p))
        p = Path(raw_bytes)
    return _realpath(p, raw)


def _realpath(p: Path, shown: str) -> Path:
    """os.path.realpath, which raises when a link it saw is replaced before it reads it."""
    try:
        return Path(os.path.realpath(p))
    except OSError:
        raise PathDenied(f"{shown}: changed while it was being checked (a link swapped)") from None


# A byte that is not UTF-8 arrives from os.scandir as a lone surrogate (surrogateescape);
# it cannot be encoded into a tool result or the session log, so it is shown as \xNN.
_ESCAPE = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")


def shown_name(name: str) -> str:
    """`name` with every undecodable byte written as `\\xNN` (what the model sees and may
    pass back: resolve() maps the escapes to the bytes again)."""
    if not any(0xDC80 <= ord(c) <= 0xDCFF for c in name):
        return name
    return "".join(f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF else c for c in name)


def hardlinks_allowed(path: Path, ctx: ToolContext) -> bool:
    """Whether `path` lies under a `hardlink_allow` directory of the policy."""
    return any(_within(path, d) for d in ctx.policy.hardlink_dirs())


def check_read(raw: str, ctx: ToolContext) -> Path:
    path = resolve(raw, ctx)
    why = refusal(path, ctx.policy)
    if why is not None:
        raise PathDenied(f"{raw}: not readable: {why}")
    return path


def check_write(raw: str, ctx: ToolContext) -> Path:
    policy = ctx.policy
    path = resolve(raw, ctx)
    if _is_secret(path, policy):
        raise PathDenied(f"{raw}: secret locations are not writable")
    if policy.mode is SandboxMode.READ_ONLY:
        raise PathDenied(f"{raw}: the sandbox is read-only; no file may be changed")
    if policy.mode is SandboxMode.FULL_ACCESS:
        return path
    roots = policy.writable_roots()
    if not any(_within(path, r) for r in roots):
        shown = ", ".join(str(r) for r in roots)
        raise PathDenied(f"{raw}: outside the writable roots ({shown}); resolved to {path}")
    if any(_within(path, d) for d in policy.deny_write_paths()):
        raise PathDenied(f"{raw}: read-only by the config's [sandbox] deny_write rule")
    for root in roots:  # at any depth: a nested `.git` is a repository planted for later
        if _within(path, root):
            hit = next(
                (n for n in path.relative_to(root).parts if n in policy.protected_names), None
            )
            if hit:
                raise PathDenied(f"{raw}: {hit} is protected and stays read-only")
    return path


def display(path: Path, ctx: ToolContext) -> str:
    """A path as the model should see it: relative to the workspace when inside it."""
    try:
        return shown_name(str(path.relative_to(Path(ctx.cwd).resolve())))
    except ValueError:
        return shown_name(str(path))
