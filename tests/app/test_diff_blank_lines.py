"""Issue 22 item 6: a diff's blank context lines (a lone space in unified diff) survive in
/diff (the DiffView's rows) and in the headless approval preview. Could not be reproduced at
this commit; these pin it, over a real git diff and a real edit_file preview."""

from __future__ import annotations

import subprocess
from pathlib import Path

from m3agent.app.headless_approvals import prompt_preview
from m3agent.app.tui.widgets.diff_view import render_diff
from m3agent.tools.safe_git import UserRepo

OLD = "a = 1\n\nb = 2\n\n\nc = 3\n"
NEW = "a = 1\n\nb = 20\n\n\nc = 3\n"
CONTEXT = [" a = 1", " ", "-b = 2", "+b = 20", " ", " ", " c = 3"]


def _repo(tmp_path: Path) -> Path:
    (tmp_path / "f.py").write_text(OLD)
    git = ["git", "-C", str(tmp_path), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run([*git, "add", "f.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    (tmp_path / "f.py").write_text(NEW)
    return tmp_path


def test_slash_diff_rows_keep_blank_context(tmp_path):
    diff = UserRepo.open(_repo(tmp_path)).diff()
    rows = render_diff(diff).plain.split("\n")
    assert rows[-len(CONTEXT) :] == CONTEXT


def test_headless_preview_keeps_blank_context(tmp_path):
    from m3agent.tools.base import ToolContext
    from m3agent.tools.edit_file import EditFile, EditFileArgs

    repo = _repo(tmp_path)
    (repo / "f.py").write_text(OLD)  # the edit still to be made
    tool = EditFile()
    ctx = ToolContext(cwd=repo)
    preview = tool.preview(EditFileArgs(path="f.py", old_string="b = 2", new_string="b = 20"), ctx)
    shown = prompt_preview(preview).splitlines()
    assert shown[-len(CONTEXT) :] == CONTEXT
