"""ctrl+v with an image on the system clipboard (a screenshot): read it with `wl-paste`
(Wayland) or `xclip` (X11) when present, save it under <home>/pasted/, and attach it, as
Claude Code's image paste. Text on the clipboard is left to the prompt's own paste."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from m3agent.tools.host_programs import host_argv, which
from m3agent.tools.private_fs import private_dir, write_private

TYPES = ("image/png", "image/jpeg", "image/webp", "image/gif")
TIMEOUT_S = 3.0


def _run(argv: list[str]) -> bytes | None:
    try:
        # found outside the workspace only (tools/host_programs.py): it runs as the user
        r = subprocess.run(host_argv(argv), capture_output=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout if r.returncode == 0 else None


def _commands() -> list[tuple[list[str], list[str]]]:
    """(list the clipboard's types, read one type: the type goes last) per tool found."""
    out = []
    if which("wl-paste"):
        out.append((["wl-paste", "--list-types"], ["wl-paste", "--no-newline", "--type"]))
    if which("xclip"):
        out.append(
            (
                ["xclip", "-selection", "clipboard", "-t", "TARGETS", "-o"],
                ["xclip", "-selection", "clipboard", "-o", "-t"],
            )
        )
    return out


def clipboard_image(dest_dir: Path) -> Path | None:
    """The clipboard's image saved as a file, or None (no tool, no image)."""
    for list_types, read in _commands():
        listed = _run(list_types)
        if listed is None:
            continue
        offered = listed.decode("utf-8", "replace").split()
        kind = next((t for t in TYPES if t in offered), None)
        if kind is None:
            continue
        data = _run([*read, kind])
        if not data:
            continue
        path = (
            private_dir(dest_dir) / f"pasted-{time.strftime('%Y%m%d-%H%M%S')}.{kind.split('/')[1]}"
        )
        write_private(path, data)
        return path
    return None
