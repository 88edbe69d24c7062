"""`m3agent --inline` in a real terminal (tmux): the UI is drawn below what the shell printed
before, the terminal never switches to the alternate screen, and after ctrl+q the last frame
(with the answer) stays in the terminal above the shell's next line. The same launch takes
`--worktree`: the session runs in the git worktree it made."""

from __future__ import annotations

import json
import shutil

import pytest
from m3agent.agent.conversation import Conversation
from tmux_driver import Tmux, pane_command, program

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


def test_inline_keeps_the_terminal_and_its_last_frame(repo, m3home, tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["</mm:think>The inline answer."]))
    args = f"--inline -w ui-1 --engine scripted --script {script} --approval never --cwd {repo}"
    line = pane_command(f"M3AGENT_HOME={m3home} TERM=xterm-256color", program(), args)
    with Tmux() as tmux:
        tmux.start(f"echo BEFORE-THE-UI; {line}", rows=30)
        tmux.wait_for("Ask m3agent")
        tmux.wait_loaded()
        assert tmux.display("#{alternate_on}") == "0"  # the normal screen: scrollback kept
        tree = repo / ".m3agent" / "worktrees" / "ui-1"
        assert tmux.joined_screen().splitlines()[:2] == [
            "BEFORE-THE-UI",
            f"worktree {tree} (branch worktree-ui-1): created",
        ]
        tmux.type("hello")
        tmux.press("Enter")
        tmux.wait_for("The inline answer.")
        tmux.quit()
        after = [s for s in tmux.screen().splitlines() if s.strip()]
        assert after[0] == "BEFORE-THE-UI"
        assert any("The inline answer." in s for s in after)  # the last frame stays
        assert after[-2].startswith("resume this session with: m3agent resume ")
        assert after[-1] == "EXIT=0"
    session_id = after[-2].rsplit(" ", 1)[1]
    assert Conversation.load(m3home / "sessions", session_id).meta.cwd == str(tree)
