"""Review mode (Codex's `codex review`): the changes to review as a diff, the prompt that asks
the model for findings, and the findings read back from its answer.

Three targets, as Codex names them: the uncommitted changes (staged, unstaged and untracked
files against HEAD), the changes of this branch against a base branch (the work tree against
their merge base), or one commit. The model answers with one JSON object (FINDINGS_SCHEMA):
each finding names a file and a line of the new version. The git behind the diff is
tools/safe_git.py's: the workspace's configuration, hooks and filters never run.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from m3agent.tools.git_refs import resolve_commit
from m3agent.tools.safe_git import DIFF_FLAGS, RepoRefused, SafeGitError, UserRepo

MAX_DIFF_CHARS = 200_000  # what the prompt carries; the model reads files for the rest
MAX_UNTRACKED_BYTES = 256 * 1024  # an untracked file bigger than this is named, not shown
PRIORITIES = ("P0", "P1", "P2", "P3")
_EMPTY_TREE = {"sha1": "4b825dc642cb6eb9a060e54bf8d69288fbee4904"}

FINDINGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["findings"],
    "properties": {
        "findings": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["file", "line", "title"],
                "properties": {
                    "file": {"type": "string", "minLength": 1},
                    "line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1},
                    "priority": {"enum": list(PRIORITIES)},
                    "title": {"type": "string", "minLength": 1},
                    "body": {"type": "string"},
                },
            },
        },
        "summary": {"type": "string"},
    },
}

REVIEW_PROMPT = """\
Review the code changes below ({what}) as a careful senior engineer would before they are \
merged. Report the problems the author would want to fix: bugs, wrong behaviour, security \
holes, data loss, race conditions, broken error handling, missing or wrong tests, clear \
performance problems. Leave out style preferences and nits, and anything that is not caused \
by these changes. You may read files of the repository to check a suspicion; change nothing.

For each problem give the file (its path relative to the repository root, as in the diff), \
the line in the new version where it is (and end_line if it spans several), a priority \
(P0: must fix, breaks things; P1: should fix before merging; P2: worth fixing; P3: minor), a \
one-line title and a body saying why it is wrong and what would fix it. No problem: an empty \
list. End with a one-paragraph summary of whether the changes are correct.
{instructions}
<diff>
{diff}
</diff>"""


class ReviewError(ValueError):
    """What to review cannot be had (not a repository, an unknown branch, no changes); the
    message is one line for the user."""


@dataclass(frozen=True, slots=True)
class ReviewTarget:
    """What to review: the uncommitted changes (both None), a base branch, or one commit."""

    base: str | None = None
    commit: str | None = None

    def __post_init__(self) -> None:
        if self.base is not None and self.commit is not None:
            raise ReviewError("give --base BRANCH or --commit SHA, not both")

    def describe(self) -> str:
        if self.base is not None:
            return f"this branch against {self.base}"
        if self.commit is not None:
            return f"commit {self.commit}"
        return "the uncommitted changes"

    def nothing(self) -> str:
        if self.base is not None:
            return f"nothing to review: this branch has no changes against {self.base}"
        if self.commit is not None:
            return f"nothing to review: commit {self.commit} changes no file"
        return "nothing to review: no uncommitted changes (and no untracked files)"


@dataclass(frozen=True, slots=True)
class ReviewDiff:
    target: ReviewTarget
    text: str  # the unified diff (cut at MAX_DIFF_CHARS, which the text then says)
    files: tuple[str, ...]  # the paths it touches, in order, from the repository's root
    root: Path  # the repository's root (the review's workspace: the diff's paths are its)

    def prompt(self, instructions: str = "") -> str:
        extra = f"\nAlso: {instructions.strip()}\n" if instructions.strip() else ""
        return REVIEW_PROMPT.format(
            what=self.target.describe(), instructions=extra, diff=self.text.rstrip("\n")
        )

    def headline(self) -> str:
        n = len(self.files)
        return f"reviewing {self.target.describe()}: {n} file{'s' if n != 1 else ''}"


@dataclass(frozen=True, slots=True)
class Finding:
    file: str
    line: int
    title: str
    body: str = ""
    priority: str = ""
    end_line: int | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            file=str(d["file"]),
            line=int(d["line"]),
            title=str(d["title"]),
            body=str(d.get("body", "")),
            priority=str(d.get("priority", "")),
            end_line=int(d["end_line"]) if d.get("end_line") is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "end_line": self.end_line,
            "priority": self.priority or None,
            "title": self.title,
            "body": self.body,
        }

    def render(self) -> str:
        """`path:line: [P1] title`, then the body indented (compilers' and linters' form)."""
        lines = f"{self.line}-{self.end_line}" if self.end_line not in (None, self.line) else ""
        where = f"{self.file}:{lines or self.line}"
        head = (
            f"{where}: [{self.priority}] {self.title}"
            if self.priority
            else f"{where}: {self.title}"
        )
        body = "".join(f"\n    {line}" for line in self.body.strip().splitlines())
        return head + body


@dataclass(frozen=True, slots=True)
class Review:
    findings: tuple[Finding, ...]
    summary: str = ""

    @classmethod
    def from_answer(cls, value: Any) -> Review:
        """From the answer's JSON, already checked against FINDINGS_SCHEMA."""
        order = {p: i for i, p in enumerate(PRIORITIES)}
        found = [Finding.from_dict(d) for d in value.get("findings", [])]
        found.sort(key=lambda f: order.get(f.priority, len(order)))  # the worst first
        return cls(tuple(found), str(value.get("summary", "")))

    def render(self) -> str:
        n = len(self.findings)
        parts = [f.render() for f in self.findings]
        parts.append(f"{n} finding{'s' if n != 1 else ''}" if n else "no findings")
        if self.summary.strip():
            parts.append(self.summary.strip())
        return "\n".join(parts)


def repo_root(start: Path) -> Path | None:
    """The nearest directory from START up that holds a `.git` (as git finds its repository)."""
    here = Path(os.path.realpath(start))
    return next((d for d in (here, *here.parents) if os.path.lexists(d / ".git")), None)


def collect_diff(cwd: Path, target: ReviewTarget) -> ReviewDiff:
    """The diff to review in the repository holding CWD; ReviewError says why there is none."""
    root = repo_root(cwd)
    if root is None:
        raise ReviewError(f"{cwd} is not in a git repository")
    try:
        repo = UserRepo.open(root)
    except RepoRefused as e:
        raise ReviewError(f"{root}: {e}") from None
    if repo is None:
        raise ReviewError(f"{root}/.git is not a git repository (no HEAD or objects)")
    try:
        text = _diff(repo, target)
    except SafeGitError as e:
        raise ReviewError(str(e)) from None
    if not text.strip():
        raise ReviewError(target.nothing())
    files = tuple(
        dict.fromkeys(
            line[len("diff --git a/") :].partition(" b/")[0]
            for line in text.splitlines()
            if line.startswith("diff --git a/")
        )
    )
    if len(text) > MAX_DIFF_CHARS:
        cut = len(text) - MAX_DIFF_CHARS
        text = text[:MAX_DIFF_CHARS] + f"\n[diff cut here: {cut} more characters; read the files]"
    return ReviewDiff(target, text, files, root)


def _commit(repo: UserRepo, name: str, what: str) -> str:
    sha = resolve_commit(repo, name)
    if sha is None:
        raise ReviewError(f"{what} {name!r}: no such branch, tag or commit in this repository")
    return sha


def _diff(repo: UserRepo, target: ReviewTarget) -> str:
    if target.commit is not None:
        sha = _commit(repo, target.commit, "--commit")
        return _text(repo.git(["show", *DIFF_FLAGS, "--format=medium", "--end-of-options", sha]))
    head = resolve_commit(repo, "HEAD")
    if target.base is not None:
        base = _commit(repo, target.base, "--base")
        if head is None:
            raise ReviewError("HEAD has no commit yet: nothing to compare with a base branch")
        merge_base = _text(repo.git(["merge-base", "--end-of-options", head, base])).strip()
        return _text(repo.git(["diff", *DIFF_FLAGS, "--end-of-options", merge_base]))
    # The uncommitted changes: the work tree (staged or not) against HEAD, and new files.
    against = head or _EMPTY_TREE["sha1"]
    parts = [_text(repo.git(["diff", *DIFF_FLAGS, "--end-of-options", against]))]
    size = len(parts[0])
    for rel in _untracked(repo):  # past the prompt's limit, a new file is only named
        parts.append(_new_file_diff(repo.workspace, rel, show=size <= MAX_DIFF_CHARS))
        size += len(parts[-1])
    return "".join(parts)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _untracked(repo: UserRepo) -> list[str]:
    raw = repo.git(["ls-files", "-z", "--others", "--exclude-standard"])
    return sorted(p for p in raw.decode("utf-8", "surrogateescape").split("\0") if p)


def _new_file_diff(root: Path, rel: str, show: bool = True) -> str:
    """An untracked file as `git diff` shows a new one (its text, or a word on why not)."""
    head = f"diff --git a/{rel} b/{rel}\nnew file (untracked)\n"
    path = root / rel
    try:
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode):
            return head + f"[a symbolic link to {os.readlink(path)}]\n"
        if not show or st.st_size > MAX_UNTRACKED_BYTES:
            return head + f"[{st.st_size} bytes, not shown here; read the file]\n"
        data = path.read_bytes()
    except OSError as e:
        return head + f"[cannot read it: {e.strerror or e}]\n"
    if b"\0" in data:
        return head + "Binary file\n"
    lines = data.decode("utf-8", "replace").splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return head + f"--- /dev/null\n+++ b/{rel}\n@@ -0,0 +1,{len(lines)} @@\n" + body
