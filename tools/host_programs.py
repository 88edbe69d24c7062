"""Where the agent finds the programs it runs on the host itself: never in the workspace.

git (checkpoints, the repository read as data: tools/safe_git.py), ripgrep (tools/grep.py),
the clipboard's programs, $EDITOR and the user's own hooks run outside the sandbox, as the
user, and are found through PATH. But a relative PATH entry (`.`, `bin`, the empty one)
names the working directory, the workspace; and an absolute entry inside the workspace is
common (an activated `.venv/bin`, direnv's `PATH_add bin`, `node_modules/.bin`). The
sandboxed model writes the workspace: a `git` it planted in `.venv/bin` would run as the user,
outside the sandbox, at the next checkpoint. So every host-side lookup goes through
`host_path`: PATH without relative entries and without any entry inside the workspace (or
the working directory). Commands in the sandbox keep the PATH they were given: what they
find there runs confined.

Libraries look programs up too, on this process's own PATH: the CPU expert kernel's build
(torch's `c++` and `ninja`), Triton's `cc`, a background `serve` this process starts. So once
the workspace is known, `confine_process_path` takes its entries out of the process's PATH as
well, keeping the PATH the user gave for the sandboxed commands (`command_path`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable

FALLBACK = "/usr/local/bin:/usr/bin:/bin"  # PATH where none is set
# (the PATH as given, the process's narrowed one) once confine_process_path ran
_confined: tuple[str, str] | None = None


def host_path(
    path: str | None = None,
    roots: Iterable[str | os.PathLike[str] | None] = (),
    *,
    cwd: bool = True,
) -> str:
    """PATH (the environment's by default) without relative entries and without entries
    inside ROOTS (the workspace) or, with CWD, the working directory, symlinks resolved."""
    path = os.environ.get("PATH", FALLBACK) if path is None else path
    here: str | None = None
    if cwd:
        try:
            here = os.getcwd()
        except OSError:  # the working directory was removed: no relative entry is kept anyway
            pass
    inside = {os.path.realpath(r) for r in (*roots, here) if r}
    kept = []
    for entry in path.split(os.pathsep):
        if not os.path.isabs(entry):
            continue  # "" and "." are the working directory: the workspace
        real = os.path.realpath(entry)
        if not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in inside):
            kept.append(entry)
    return os.pathsep.join(kept)


def which(name: str, roots: Iterable[str | os.PathLike[str] | None] = ()) -> str | None:
    """The absolute path of program NAME as found on `host_path(roots=ROOTS)` (None: none);
    a NAME with a `/` is taken as given, as the shell does."""
    if os.sep in name:
        return name
    return shutil.which(name, path=host_path(roots=roots))


def host_argv(argv: list[str], roots: Iterable[str | os.PathLike[str] | None] = ()) -> list[str]:
    """ARGV with its program resolved by `which`; FileNotFoundError when it is found nowhere
    else (never looked up again on the whole PATH)."""
    found = which(argv[0], roots)
    if found is None:
        raise FileNotFoundError(f"{argv[0]}: not found outside the workspace")
    return [found, *argv[1:]]


def confine_process_path(
    roots: Iterable[str | os.PathLike[str] | None], *, cwd: bool = False
) -> None:
    """Takes relative entries and entries inside ROOTS (the workspace and the other writable
    roots; with CWD, the working directory too) out of this process's PATH, so that nothing
    this process or a library in it starts on the host (a compiler, a background serve) is a
    program the model planted. `command_path` keeps the PATH as given for sandboxed commands."""
    global _confined
    given = command_path()
    narrowed = host_path(os.environ.get("PATH", FALLBACK), roots, cwd=cwd)
    _confined = (given, narrowed)
    os.environ["PATH"] = narrowed


def command_path() -> str:
    """The PATH sandboxed commands get: the one the user gave this process (a PATH set after
    confine_process_path, by the embedding program or a test, is taken as given)."""
    current = os.environ.get("PATH", FALLBACK)
    if _confined is not None and current == _confined[1]:
        return _confined[0]
    return current
