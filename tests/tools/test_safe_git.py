"""The agent's own git runs no repository code (issue 13, class 2).

Each attack configures a real repository so that git runs a program that writes a marker
file. The control runs plain git (git's defaults, as the agent did before) and sees the
marker; the attempt runs every git operation the agent does (the snapshot listing, a
checkpoint, an undo, the TUI's /diff) and asserts that no marker was written.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.agent.context.files import FileRules, list_candidates
from m3agent.app.tui.slash_actions import _workspace_diff
from m3agent.tools.checkpoint import Checkpoints
from m3agent.tools.safe_git import RepoRefused, UserRepo, run_git

from ..support.cli import scripted_run
from ..support.markup import answer, calls, invoke


def _env(tmp: Path) -> dict[str, str]:
    """Plain git as a user has it, minus this machine's own config files."""
    home = tmp / "plainhome"
    home.mkdir(exist_ok=True)
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }


def git(ws: Path, *args: str, tmp: Path, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(["git", "-C", str(ws), *args], env=_env(tmp), timeout=60, **kw)


class Hostile:
    """A repository, a marker file, and a program that appends its arguments to the marker."""

    def __init__(self, tmp: Path, name: str = "ws"):
        self.tmp = tmp
        self.ws = tmp / name
        self.marker = tmp / "MARKER"
        self.prog = tmp / "evil.sh"
        self.prog.write_text(
            f'#!/bin/sh\necho "$0 $*" >> {self.marker}\n'
            'case "$1" in clean|smudge|textconv) cat ;; esac\n'
        )
        self.prog.chmod(0o755)
        self.ws.mkdir()
        (self.ws / "a.txt").write_text("one\n")
        (self.ws / ".gitattributes").write_text("* filter=x diff=x\n")
        git(self.ws, "init", "-q", tmp=tmp, check=True)
        git(self.ws, "add", "-A", tmp=tmp, check=True)
        git(self.ws, "commit", "-qm", "init", tmp=tmp, check=True)

    def config(self, key: str, value: str, where: Path | None = None) -> None:
        git(where or self.ws, "config", key, value, tmp=self.tmp, check=True)

    def ran(self) -> str:
        return self.marker.read_text() if self.marker.exists() else ""

    def reset(self) -> None:
        self.marker.unlink(missing_ok=True)


def _hooks(h: Hostile) -> Path:
    d = h.tmp / "hooks"
    d.mkdir(exist_ok=True)
    for name in (
        "post-index-change",
        "pre-commit",
        "post-checkout",
        "reference-transaction",
        "pre-auto-gc",
        "post-commit",
    ):
        (d / name).write_text(f"#!/bin/sh\necho hook {name} >> {h.marker}\n")
        (d / name).chmod(0o755)
    return d


def _plant_hooks(h: Hostile) -> None:
    for p in _hooks(h).iterdir():
        (h.ws / ".git/hooks" / p.name).write_bytes(p.read_bytes())
        (h.ws / ".git/hooks" / p.name).chmod(0o755)


def _pager_control(h: Hostile) -> None:
    master, slave = pty.openpty()  # git pages only to a terminal
    try:
        git(h.ws, "log", tmp=h.tmp, stdout=slave, stderr=slave, capture_output=False)
    finally:
        os.close(slave)
        os.close(master)


def _fetch_control(h: Hostile) -> None:
    git(h.ws, "fetch", "-q", "origin", tmp=h.tmp)


def _add_control(h: Hostile) -> None:
    """Change a.txt and stage it (what the filter and hook attacks act on)."""
    h.ws.joinpath("a.txt").write_text("two\n")
    git(h.ws, "add", "a.txt", tmp=h.tmp)


def _diff_control(h: Hostile) -> None:
    """Change a.txt and diff it (what the diff-driver attacks act on)."""
    h.ws.joinpath("a.txt").write_text("two\n")
    git(h.ws, "diff", tmp=h.tmp)


# name -> (set the attack up, the plain-git command that shows it works)
ATTACKS = {
    "core.fsmonitor": (
        lambda h: h.config("core.fsmonitor", str(h.prog)),
        lambda h: git(h.ws, "ls-files", "--cached", "--others", tmp=h.tmp),
    ),
    "clean filter": (
        lambda h: h.config("filter.x.clean", f"{h.prog} clean"),
        _add_control,
    ),
    "smudge filter": (
        lambda h: h.config("filter.x.smudge", f"{h.prog} smudge"),
        lambda h: (
            h.ws.joinpath("a.txt").unlink(),
            git(h.ws, "checkout", "--", "a.txt", tmp=h.tmp),
        ),
    ),
    "filter process": (
        lambda h: h.config("filter.x.process", f"{h.prog} process"),
        _add_control,
    ),
    "textconv": (
        lambda h: h.config("diff.x.textconv", f"{h.prog} textconv"),
        _diff_control,
    ),
    "diff.external": (
        lambda h: h.config("diff.external", str(h.prog)),
        _diff_control,
    ),
    "core.hooksPath": (
        lambda h: h.config("core.hooksPath", str(_hooks(h))),
        _add_control,
    ),
    ".git/hooks": (
        lambda h: _plant_hooks(h),
        _add_control,
    ),
    "include.path": (
        lambda h: (
            (h.tmp / "inc.cfg").write_text(f"[core]\n\tfsmonitor = {h.prog}\n"),
            h.config("include.path", str(h.tmp / "inc.cfg")),
        ),
        lambda h: git(h.ws, "status", tmp=h.tmp),
    ),
    "includeIf": (
        lambda h: (
            (h.tmp / "inc.cfg").write_text(f"[core]\n\tfsmonitor = {h.prog}\n"),
            h.config(f"includeIf.gitdir:{h.ws}/.git.path", str(h.tmp / "inc.cfg")),
        ),
        lambda h: git(h.ws, "status", tmp=h.tmp),
    ),
    "core.pager": (lambda h: h.config("core.pager", f"{h.prog} pager"), _pager_control),
    "core.sshCommand": (
        lambda h: (
            h.config("core.sshCommand", f"{h.prog} ssh"),
            h.config("remote.origin.url", "ssh://example.invalid/r"),
        ),
        _fetch_control,
    ),
}


def agent_git_operations(ws: Path, state: Path) -> None:
    """Everything the agent's own git does to a workspace, with real changes to act on."""
    keep, _ = list_candidates(ws, FileRules())  # the snapshot listing
    assert "a.txt" in {c.path for c in keep}
    cps = Checkpoints(ws, state)
    (ws / "a.txt").write_text("changed by a turn\n")
    first = cps.snapshot("before turn 2")  # a checkpoint (git add -A, write-tree ...)
    (ws / "a.txt").write_text("changed again\n")
    (ws / "new.txt").write_text("new\n")
    assert "changed again" in _workspace_diff(ws)  # the TUI's /diff
    cps.restore(first)  # undo (read-tree, checkout-index)
    assert (ws / "a.txt").read_text() == "changed by a turn\n" and not (ws / "new.txt").exists()
    assert cps.list() == []


@pytest.mark.parametrize("attack", ATTACKS)
def test_control_plain_git_runs_the_repository_code(attack, tmp_path):
    h = Hostile(tmp_path)
    setup, control = ATTACKS[attack]
    setup(h)
    control(h)
    assert h.ran(), f"{attack}: plain git did not run the planted program"


@pytest.mark.parametrize("attack", ATTACKS)
def test_agent_git_runs_none_of_it(attack, tmp_path):
    h = Hostile(tmp_path)
    ATTACKS[attack][0](h)
    agent_git_operations(h.ws, tmp_path / "state")
    assert h.ran() == "", f"{attack}: the agent's git ran {h.ran()!r}"


def test_every_attack_at_once_through_the_installed_console_script(tmp_path):
    """`m3agent run` (snapshot, a checkpoint before edit_file) then `m3agent undo`."""
    h = Hostile(tmp_path)
    for name, (setup, _) in ATTACKS.items():
        if name not in (".git/hooks", "includeIf"):  # (same marker paths; one include suffices)
            setup(h)
    call = calls(invoke("edit_file", path="a.txt", old_string="one", new_string="uno"))
    script = tmp_path / "script.json"
    script.write_text(json.dumps([call, answer("done")]))
    exe = Path(sys.executable).with_name("m3agent")
    env = dict(os.environ, M3AGENT_HOME=str(tmp_path / "m3home"), HOME=str(tmp_path / "plainhome"))
    env.pop("M3AGENT_CONFIG", None)
    (tmp_path / "plainhome").mkdir(exist_ok=True)
    r = subprocess.run(
        [str(exe), *scripted_run("fix", script, h.ws, "--output-format", "json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["answer"] == "done"
    assert (h.ws / "a.txt").read_text() == "uno\n"
    assert any(c.get("action") == "snapshot" for c in out["context"])  # the listing ran
    u = subprocess.run(
        [str(exe), "undo", "--cwd", str(h.ws)], env=env, capture_output=True, text=True, timeout=60
    )
    assert u.returncode == 0, u.stderr
    assert (h.ws / "a.txt").read_text() == "one\n"
    assert h.ran() == ""
    # Control: the same repository runs the planted code under plain git.
    git(h.ws, "status", tmp=tmp_path)
    assert h.ran()


def test_a_nested_repository_a_command_created_is_never_run(tmp_path):
    h = Hostile(tmp_path)
    sub = h.ws / "vendor_tool"
    sub.mkdir()
    (sub / "b.txt").write_text("b\n")
    (sub / ".gitattributes").write_text("* filter=x diff=x\n")
    git(sub, "init", "-q", tmp=tmp_path, check=True)  # what a model's command could do
    for key, value in (
        ("core.fsmonitor", str(h.prog)),
        ("filter.x.clean", f"{h.prog} clean"),
        ("core.hooksPath", str(_hooks(h))),
    ):
        h.config(key, value, where=sub)
    agent_git_operations(h.ws, tmp_path / "state")
    assert h.ran() == ""
    git(sub, "add", "-A", tmp=tmp_path)  # control: git run inside it runs its code
    assert h.ran()


def test_a_git_file_pointing_elsewhere_is_refused(tmp_path):
    """A `.git` FILE (gitdir: ...) is never followed: not for the listing, not for /diff."""
    h = Hostile(tmp_path, name="elsewhere")
    h.config("core.fsmonitor", str(h.prog))
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    (ws / ".git").write_text(f"gitdir: {h.ws / '.git'}\n")
    keep, skipped = list_candidates(ws, FileRules())
    assert "a.txt" in {c.path for c in keep}  # listed by the plain walk instead
    assert any(s.path == ".git" and "is a file" in s.reason for s in skipped)
    with pytest.raises(RepoRefused, match="is a file"):
        UserRepo.open(ws)
    cps = Checkpoints(ws, tmp_path / "state")  # the shadow repository never reads it
    cps.snapshot("x")
    assert h.ran() == ""
    git(ws, "status", tmp=tmp_path)  # control: plain git follows the file and runs the code
    assert h.ran()


def test_a_git_dir_swapped_after_open_is_refused(tmp_path):
    h = Hostile(tmp_path)
    repo = UserRepo.open(h.ws)
    assert repo is not None
    (h.ws / ".git").rename(h.ws / "old.git")
    (h.ws / ".git").symlink_to(h.ws / "old.git")
    with pytest.raises(RepoRefused):
        repo.diff()


def test_the_agent_environment_does_not_reach_git(tmp_path, monkeypatch):
    """GIT_* variables of the agent's own process (GIT_CONFIG_PARAMETERS, GIT_EXTERNAL_DIFF)
    are not inherited: git's environment is built from scratch."""
    h = Hostile(tmp_path)
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", str(h.prog))
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "core.fsmonitor")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", str(h.prog))
    agent_git_operations(h.ws, tmp_path / "state")
    assert h.ran() == ""
    subprocess.run(["git", "-C", str(h.ws), "diff"], capture_output=True)  # control
    assert h.ran()


def test_run_git_reports_failures_in_one_line(tmp_path):
    from m3agent.tools.safe_git import SafeGitError

    with pytest.raises(SafeGitError, match=r"^git rev-parse failed: .*"):
        run_git(["rev-parse", "HEAD"], git_dir=tmp_path / "nothing", work_tree=tmp_path)


def test_a_git_dir_planted_after_the_session_started_runs_nothing(tmp_path):
    """No .git when the session starts; a command then makes one with fsmonitor, a clean
    filter and hooks. The agent's git reads it as data only."""
    h = Hostile(tmp_path, name="made")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    cps = Checkpoints(ws, tmp_path / "state")
    cps.snapshot("session start")  # no .git yet
    (h.ws / ".git").rename(ws / ".git")  # what `git init` plus `git config` in a command does
    (ws / ".gitattributes").write_text("* filter=x diff=x\n")
    for key, value in (
        ("core.fsmonitor", str(h.prog)),
        ("filter.x.clean", f"{h.prog} clean"),
        ("core.hooksPath", str(_hooks(h))),
        ("diff.external", str(h.prog)),
    ):
        h.config(key, value, where=ws)
    agent_git_operations(ws, tmp_path / "state2")
    cps.snapshot("later")
    assert h.ran() == ""
    git(ws, "status", tmp=tmp_path)  # control
    assert h.ran()


@pytest.mark.parametrize("fmt", ["sha1", "sha256"])
def test_the_borrowed_index_sees_a_same_size_edit_in_the_same_second(fmt, tmp_path):
    """The copied index keeps its mtime (git's racy-clean check needs it); both object
    formats. Control: plain git sees the same change."""
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q", f"--object-format={fmt}", tmp=tmp_path, check=True)
    (ws / "a.txt").write_text("a\n")
    git(ws, "add", "a.txt", tmp=tmp_path, check=True)
    git(ws, "commit", "-qm", "i", tmp=tmp_path, check=True)
    (ws / "a.txt").write_text("b\n")  # same size, very likely the same second
    assert "+b" in git(ws, "diff", tmp=tmp_path).stdout.decode()  # control
    repo = UserRepo.open(ws)
    assert repo is not None
    assert "-a\n+b\n" in repo.diff()
    files, changed = repo.list_files()
    assert files == ["a.txt"] and changed == {"a.txt"}
