"""What a project hook's trust covers beyond its command line: the workspace files it names.

A project's hook runs in the tool sandbox (confined.py), but its answers still decide for
the user (a guard that blocks a call), and the files of the workspace are the model's to
write. A trusted `python3 .claude/hooks/guard.py` would run whatever the model later wrote
into guard.py, so `m3agent hooks trust` records, beside the command lines, a hash of every
workspace file a command names (and that a named one was absent), and a hook runs only while
each of them is as trusted: `changed` before every run says which are not.

A command names a file by a word that is a path: one with a `/`, one that ends like a script
(`.py`, `.sh`, ...), or one that is an existing file or directory of the workspace when
trusted (a directory, `cd hooks && ./run.sh`, is pinned whole: every file under it); the
project-directory variables Claude Code's hooks use (`$CLAUDE_PROJECT_DIR`,
`$M3AGENT_PROJECT_DIR`) are read as the workspace; quoted words (`sh -c "..."`) are read
again inside; `--opt=PATH` counts by its value; `python -m pkg.mod` names the package `pkg`
(or `pkg.py`); `$PWD` is the workspace too. A word the shell would expand otherwise (another
`$VAR`, `$(...)`, backquotes, a glob) could name any file: such a command cannot be pinned,
and its hook does not run. What a named program itself opens later (a test runner's tests, a Makefile's
recipes) is not a word of the command: docs/hooks.md says why such a hook should not run on
the project's own code. A named file's directory (but the workspace root) is pinned with it:
a script sources or imports what lies beside it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

from m3agent.tools.host_read import HostReader, ReadRefused, default_reader

Pins = tuple[tuple[str, str | None], ...]  # (path relative to the workspace, sha256 or None)

_SCRIPT = re.compile(r"\.(py|sh|bash|zsh|js|mjs|cjs|ts|rb|pl|php|lua|ps1|jar)$")
# What the shell sets to the workspace when a hook runs (runner.py: its cwd and environment).
_PROJECT_VARS = re.compile(r"\$\{?(CLAUDE_PROJECT_DIR|M3AGENT_PROJECT_DIR|PWD)\}?")
_DEPTH = 3  # quoting levels read again
_TREE_FILES = 2000  # a named directory with more files than this cannot be pinned
_FILE_LIMIT = 64 << 20  # nor a larger file
# Never equal to a digest: a hook with such a pin never runs.
UNPINNABLE = "cannot be pinned"
# A word the shell would expand into names we cannot know now ($VAR, $(...), `...`, a glob):
# whatever it names could be any file of the workspace.
UNRESOLVED = "(a word the shell expands: $VAR, $(...), `...` or a glob)"


def _words(command: str, depth: int = 0) -> Iterator[str]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True  # words as the shell splits them, `;` `&&` `|` apart
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: plain words
        words = command.split()
    for before, word in zip(["", *words], words, strict=False):
        yield word
        if before == "-m" and word and not word.startswith("-"):  # python -m pkg.mod
            top = word.split(".", 1)[0]
            yield top
            yield top + ".py"
        if "=" in word:
            yield word.split("=", 1)[1]
        if depth < _DEPTH and any(c.isspace() for c in word):
            yield from _words(word, depth + 1)


def _inside(project: Path, word: str) -> str | None:
    """`word` as a path relative to the workspace, when it lies inside it (None: not)."""
    root = os.path.normpath(str(project))
    path = os.path.normpath(word if os.path.isabs(word) else os.path.join(root, word))
    rel = os.path.relpath(path, root)
    if rel == "." or rel == ".." or rel.startswith("../"):
        return None
    return rel


def named_files(command: str, project: Path) -> tuple[str, ...]:
    """The workspace paths `command` names, relative to the workspace, in order, each once."""
    out: list[str] = []
    for word in _words(_PROJECT_VARS.sub(lambda _m: str(project), command)):
        word = word.strip()
        if not word or any(c.isspace() for c in word):
            continue  # a quoted command: read word by word above
        if any(c in word for c in "$`*?["):
            if UNRESOLVED not in out:
                out.append(UNRESOLVED)
            continue
        if word.startswith(("-", "~")):
            continue  # an option (its `=VALUE` read above), or the home's
        rel = _inside(project, word)
        if rel is None:
            continue
        pathlike = "/" in word or _SCRIPT.search(word) is not None
        if not (pathlike or os.path.exists(project / rel)):
            continue
        # A script's directory comes with it: what it sources or imports from beside itself.
        parent = os.path.dirname(rel)
        for name in (rel, parent) if parent and not os.path.isdir(project / rel) else (rel,):
            if name not in out:
                out.append(name)
    return tuple(out)


def digest(project: Path, rel: str, reader: HostReader | None = None) -> str | None:
    """sha256 of the file as a hook would run it (through a symlink, as the shell follows
    one), or of a directory's every name and file under it; None when there is none. Read
    under the host read policy (tools/host_read.py): a link to a secret, a device or a FIFO
    cannot be pinned, and neither can a file too large to read."""
    if rel == UNRESOLVED:
        return UNPINNABLE
    reader = reader or default_reader(project)
    path = project / rel
    if os.path.isdir(path):
        return _tree(path, reader)
    if not os.path.lexists(path):
        return None
    try:
        return hashlib.sha256(reader.read_bytes(path, _FILE_LIMIT)).hexdigest()
    except ReadRefused:
        return UNPINNABLE


def _tree(root: Path, reader: HostReader) -> str:
    h = hashlib.sha256()
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + [d + "/" for d in dirnames]:
            count += 1
            if count > _TREE_FILES:
                return UNPINNABLE
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            sub = None if name.endswith("/") else digest(Path(dirpath), name, reader)
            h.update(f"{rel}\0{sub}\0".encode(errors="surrogateescape"))
    return h.hexdigest()


def pin(command: str, project: Path) -> Pins:
    """The pins of `command` as the workspace is now."""
    return tuple((rel, digest(project, rel)) for rel in named_files(command, project))


def changed(pins: Pins, project: Path) -> list[str]:
    """The pinned paths that are not as they were trusted."""
    reader = default_reader(project) if pins else None
    return [rel for rel, sha in pins if sha == UNPINNABLE or digest(project, rel, reader) != sha]
