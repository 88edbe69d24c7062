"""A linked worktree's `.git` file (`--worktree`) is followed by the agent's git, as data:
the listing, /diff and a review work there and run none of the repository's code (control:
plain git in the same worktree runs it). A `.git` file that only looks like a worktree's (no
link back, a repository inside the workspace) is still refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from m3agent.agent.review import ReviewTarget, collect_diff
from m3agent.app.worktree import enter_worktree
from m3agent.tools.safe_git import RepoRefused, UserRepo, linked_worktree

from .test_safe_git import Hostile, git


def test_a_linked_worktree_is_read_as_data(tmp_path):
    h = Hostile(tmp_path)
    tree = enter_worktree(h.ws, "side").path
    for key, value in (("core.fsmonitor", str(h.prog)), ("diff.x.textconv", str(h.prog))):
        h.config(key, value)
    (tree / "a.txt").write_text("two\n")
    (tree / "b.txt").write_text("new\n")
    assert linked_worktree(tree) == (h.ws / ".git" / "worktrees" / "side", h.ws / ".git")
    repo = UserRepo.open(tree)
    files, changed = repo.list_files()
    assert files == [".gitattributes", "a.txt", "b.txt"] and changed == {"a.txt", "b.txt"}
    assert "+two" in repo.diff()
    review = collect_diff(tree, ReviewTarget())
    assert review.files == ("a.txt", "b.txt") and "+new" in review.text
    assert "+two" in collect_diff(tree, ReviewTarget(base="HEAD")).text
    assert h.ran() == ""
    git(tree, "diff", tmp=tmp_path)  # control: plain git in the worktree runs the code
    assert h.ran()


@pytest.mark.parametrize("forgery", ["no_link_back", "repository_inside"])
def test_a_forged_worktree_file_is_refused(tmp_path, forgery):
    h = Hostile(tmp_path)
    ws = tmp_path / "forged"
    ws.mkdir()
    if forgery == "no_link_back":  # a real worktree's directory, but it names another .git
        other = enter_worktree(h.ws, "real").path
        target = h.ws / ".git" / "worktrees" / "real"
        assert linked_worktree(other) is not None
    else:  # the whole layout made inside the workspace, where a command could write it
        inner = ws / "fake" / ".git"
        target = inner / "worktrees" / "x"
        target.mkdir(parents=True)
        (inner / "objects").mkdir()
        (target / "HEAD").write_text("ref: refs/heads/main\n")
        (target / "gitdir").write_text(f"{ws / '.git'}\n")
        (target / "commondir").write_text("../..\n")
    (ws / ".git").write_text(f"gitdir: {target}\n")
    assert linked_worktree(ws) is None
    with pytest.raises(RepoRefused, match="is a file"):
        UserRepo.open(ws)
    assert Path(ws / ".git").is_file()
