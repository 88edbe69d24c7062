"""Per-program rules for "always allow this command prefix" (shell calls).

A prefix is what the user allowed; it covers a later command only when that command's own
prefix, computed by the same rules, is the same. The rules know which programs, options and
arguments run other programs or write elsewhere:
- a *wrapper* (`timeout 60 CMD`, `nice -n 5 CMD`, `nohup CMD`, ...) runs what follows it, so
  its prefix is the wrapper's own words plus the prefix of the command it runs: allowing
  `timeout 60 true` never covers `timeout 60 rm -rf ~`;
- programs that run code taken from their arguments or input, or change who runs it (`sudo`,
  `env`, `xargs`, `bash -c`, `exec`, `sed`, `ssh`, a container client, ...) get no prefix;
- for the rest, options known to run a program or write outside the command's target
  (`git grep -O<pager>`, `git fetch --upload-pack`, `find -exec`, `make SHELL=...`) make the
  command have no prefix, so it is asked about whatever was allowed before; git's long
  options match abbreviated (`--open-files` is `--open-files-in-pager`), since git accepts
  any unambiguous abbreviation;
- git's action must be one of its built-in commands: an alias (`!sh -c ...`) gets none.
Shell syntax (`;`, pipes, `$(...)`, redirections) never gets a prefix (agent/command_prefix.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath
from typing import TypedDict, Unpack


class Kind(StrEnum):
    PLAIN = "plain"  # the prefix is the program
    ACTION = "action"  # the second word picks the action (`git status`, `npm test`)
    WRAPPER = "wrapper"  # runs the command after its own options
    NEVER = "never"  # runs code from its arguments or input, or as someone else: no prefix


@dataclass(frozen=True, slots=True)
class Program:
    kind: Kind
    # Options that take a value as the next word (so the wrapped command starts after it).
    valued: frozenset[str] = frozenset()
    # Wrapper: how many plain words it takes before the command (timeout's DURATION).
    operands: int = 0
    # Options (whole words, or long names that match abbreviated) that run or write elsewhere.
    danger_words: frozenset[str] = frozenset()
    danger_long: tuple[str, ...] = ()
    assignments_run: bool = False  # `make SHELL=/x`: a NAME=VALUE word is dangerous
    # getopt-style bundles (`-xIcmd`): a two-character danger word's letter anywhere in a
    # single-dash word counts (off for Go's flags, where `-run=TestC` is one long name)
    bundles: bool = True
    old_style: bool = False  # tar's first word may be a dashless bundle (`tar xIf ...`)


class _Flags(TypedDict, total=False):
    """Program's fields that _p passes on as they are."""

    operands: int
    danger_long: tuple[str, ...]
    assignments_run: bool
    bundles: bool
    old_style: bool


def _p(
    kind: Kind,
    *,
    valued: Iterable[str] = (),
    danger_words: Iterable[str] = (),
    **flags: Unpack[_Flags],
) -> Program:
    return Program(kind, valued=frozenset(valued), danger_words=frozenset(danger_words), **flags)


_NEVER = _p(Kind.NEVER)
# fmt: off
_NEVER_NAMES = (
    "sudo", "doas", "su", "pkexec", "runuser", "env", "xargs", "exec", "eval", "source", ".",
    "bash", "sh", "zsh", "dash", "ksh", "mksh", "fish", "csh", "tcsh", "busybox", "toybox",
    "chroot", "unshare", "nsenter", "systemd-run", "watch", "parallel", "strace", "ltrace",
    "gdb", "script", "ssh", "flock", "firejail", "bwrap", "proot", "fakeroot", "at", "batch",
    "crontab", "sed", "awk", "gawk", "mawk", "nawk", "perl", "ruby", "node", "deno", "bun",
    "php", "lua", "tclsh", "expect", "docker", "podman", "kubectl", "nerdctl", "taskset",
    "chrt", "numactl", "prlimit", "caffeinate", "entr", "dbus-send", "systemctl", "osascript",
    # package runners (fetch and run any package), editors and pagers (`:!cmd`, `-c cmd`),
    # terminal multiplexers, database shells (`.shell`, `\\!`), profilers that run a command
    "npx", "bunx", "pnpx", "uvx", "pipx", "vim", "vi", "nvim", "emacs", "less", "more", "man",
    "tmux", "screen", "sqlite3", "mysql", "psql", "valgrind", "perf", "xterm", "sg", "newgrp",
    "open", "xdg-open",
)
GIT_ACTIONS = frozenset({
    "status", "log", "diff", "show", "grep", "branch", "tag", "add", "commit", "checkout",
    "switch", "restore", "reset", "rm", "mv", "fetch", "pull", "push", "merge", "rebase",
    "stash", "blame", "shortlog", "describe", "rev-parse", "rev-list", "ls-files", "ls-tree",
    "cat-file", "remote", "clone", "init", "clean", "cherry-pick", "revert", "format-patch",
    "apply", "am", "archive", "worktree", "reflog", "notes", "show-ref", "for-each-ref",
    "name-rev", "count-objects", "fsck", "gc", "prune", "version", "whatchanged", "range-diff",
    "ls-remote", "cherry", "merge-base", "diff-tree", "diff-files", "diff-index", "show-branch",
})
# fmt: on
# Short options per git action that run a program or write elsewhere (grep -O<pager>,
# rebase -x<cmd>, clone -c<config>/-u<upload-pack>, format-patch -o<dir>, archive -o<file>).
GIT_SHORT = {
    "grep": "O",
    "clone": "cu",
    "fetch": "u",
    "pull": "u",
    "ls-remote": "u",
    "rebase": "x",
    "format-patch": "o",
    "archive": "o",
}
GIT_LONG = (
    "open-files-in-pager",
    "upload-pack",
    "receive-pack",
    "exec",
    "output",
    "output-directory",
    "ext-diff",
    "extcmd",
    "tool",
    "template",
    "config",
    "remote",
    "separate-git-dir",
    "reference",
    "server-option",
)
PROGRAMS: dict[str, Program] = {
    **{n: _NEVER for n in _NEVER_NAMES},
    "timeout": _p(Kind.WRAPPER, valued={"-s", "--signal", "-k", "--kill-after"}, operands=1),
    "nice": _p(Kind.WRAPPER, valued={"-n", "--adjustment"}),
    "nohup": _p(Kind.WRAPPER),
    "stdbuf": _p(Kind.WRAPPER, valued={"-i", "-o", "-e", "--input", "--output", "--error"}),
    "ionice": _p(Kind.WRAPPER, valued={"-c", "--class", "-n", "--classdata"}),
    "setsid": _p(Kind.WRAPPER),
    "time": _p(Kind.WRAPPER),
    "command": _p(Kind.WRAPPER),
    "builtin": _p(Kind.WRAPPER),
    "find": _p(
        Kind.PLAIN,
        danger_words={
            "-exec",
            "-execdir",
            "-ok",
            "-okdir",
            "-delete",
            "-fprint",
            "-fprint0",
            "-fprintf",
            "-fls",
        },
    ),  # fmt: skip
    # options whose value is a command (tar's checkpoint action, rsync's remote shell, ...)
    "tar": _p(
        Kind.PLAIN,
        danger_words={"-I", "-F"},
        old_style=True,
        danger_long=(
            "to-command",
            "use-compress-program",
            "checkpoint-action",
            "info-script",
            "new-volume-script",
            "rsh-command",
        ),
    ),  # fmt: skip
    "rsync": _p(Kind.PLAIN, danger_words={"-e"}, danger_long=("rsh", "rsync-path")),
    "zip": _p(Kind.PLAIN, danger_words={"-TT"}, danger_long=("unzip-command",)),
    "wget": _p(Kind.PLAIN, danger_words={"-e"}, danger_long=("execute", "use-askpass")),
    "make": _p(
        Kind.ACTION,
        danger_words={"-C", "-f", "-E", "-I", "-o", "-W"},
        danger_long=("directory", "file", "makefile", "eval", "include-dir", "what-if"),
        assignments_run=True,
    ),
    "npm": _p(Kind.ACTION, danger_long=("script-shell", "prefix", "userconfig", "node-options")),
    "pnpm": _p(Kind.ACTION, danger_long=("script-shell", "dir", "prefix")),
    "yarn": _p(Kind.ACTION, danger_long=("cwd",)),
    "cargo": _p(Kind.ACTION, danger_words={"-Z", "-C"}, danger_long=("config", "manifest-path")),
    "go": _p(Kind.ACTION, danger_words={"-exec", "-toolexec", "-C", "-overlay"}, bundles=False),
    **{
        n: _p(Kind.ACTION)
        for n in ("uv", "pip", "pip3", "poetry", "just", "dotnet", "gradle", "mvn", "hatch")
    },
    **{n: _p(Kind.ACTION) for n in ("tox", "nox")},
}
# Actions of these tools that run whatever they are given.
_NEVER_ACTIONS = {
    "npm": {"exec", "x"},
    "pnpm": {"exec", "dlx"},
    "yarn": {"exec", "dlx"},
    "uv": {"run", "tool"},
    "poetry": {"run"},
    "hatch": {"run", "shell"},
    "go": {"run", "generate"},
    "cargo": {"run"},
}
_PYTHONS = frozenset({"python", "python3"})


def program_of(word: str) -> str:
    """`/usr/bin/timeout` is timeout: a path to a program follows the program's rules."""
    return PurePosixPath(word).name


def _long_hit(word: str, names: tuple[str, ...]) -> bool:
    if not word.startswith("--") or len(word) < 3:
        return False
    name = word[2:].split("=", 1)[0]
    return any(n.startswith(name) for n in names)


def _short_hit(word: str, letters: str) -> bool:
    # A bundle (`-nO`, `-Otouch x`) holds the letter; a false hit only means asking.
    return word.startswith("-") and not word.startswith("--") and any(c in word for c in letters)


def _dangerous(prog: Program, rest: list[str]) -> bool:
    letters = "".join(d[1] for d in prog.danger_words if len(d) == 2 and d.startswith("-"))
    if prog.old_style and rest and not rest[0].startswith("-") and letters:
        if any(c in rest[0] for c in letters):
            return True
    for w in rest:
        if w in prog.danger_words or any(w.startswith(d + "=") for d in prog.danger_words):
            return True
        if letters and (
            _short_hit(w, letters)
            if prog.bundles
            else any(w.startswith("-" + c) and len(w) > 2 for c in letters)
        ):
            return True
        if _long_hit(w, prog.danger_long):
            return True
        if prog.assignments_run and "=" in w and not w.startswith("-"):
            return True
    return False


def _git(words: list[str]) -> tuple[str, ...] | None:
    if len(words) < 2 or words[1] not in GIT_ACTIONS:
        return None  # options before the action (-c, -C, -p...) or an alias: no safe prefix
    rest = words[2:]
    if any(_long_hit(w, GIT_LONG) for w in rest):
        return None
    if any(_short_hit(w, GIT_SHORT.get(words[1], "")) for w in rest):
        return None
    return tuple(words[:2])


def _wrapper(prog: Program, words: list[str]) -> tuple[str, ...] | None:
    i, operands = 1, prog.operands
    while i < len(words):
        w = words[i]
        if w == "--":
            i += 1
            break
        if w.startswith("-") and len(w) > 1:
            if w in prog.valued:
                i += 2
                continue
            if w.startswith("--") and "=" in w and w.split("=", 1)[0] in prog.valued:
                i += 1
                continue
            if w[1:].isdigit() or (len(w) > 2 and w[:2] in prog.valued):  # nice -5, -n5
                i += 1
                continue
            return None  # an option we do not know: it may take the command as its value
        break
    if i + operands >= len(words):
        return None
    inner = prefix_of(words[i + operands :])
    return None if inner is None else tuple(words[: i + operands]) + inner


def prefix_of(words: list[str]) -> tuple[str, ...] | None:
    """The prefix of a command already split into words (no shell syntax), or None."""
    if not words or "=" in words[0]:  # FOO=1 cmd: an environment change, ask each time
        return None
    name = program_of(words[0])
    if name in _PYTHONS:
        ok = len(words) >= 3 and words[1] == "-m"
        return tuple(words[:3]) if ok and not words[2].startswith("-") else None
    if name == "git":
        return _git(words)
    prog = PROGRAMS.get(name, Program(Kind.PLAIN))
    if prog.kind is Kind.NEVER:
        return None
    if prog.kind is Kind.WRAPPER:
        return _wrapper(prog, words)
    if _dangerous(prog, words[1:]):
        return None
    if prog.kind is Kind.ACTION:
        if len(words) < 2 or words[1].startswith("-"):
            return None
        if words[1] in _NEVER_ACTIONS.get(name, ()):
            return None
        return tuple(words[:2])
    return (words[0],)
