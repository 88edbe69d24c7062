"""Issue 23 in a real terminal: a custom command in the `/` menu, the pinned plan, and a
subagent's activity nested in its task card (`m3agent` under tmux, scripted M3 output)."""

from __future__ import annotations

import json
import shutil

import pytest
from tmux_driver import Tmux, scripted_command

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
NS = "]<]minimax[>["


def invoke(name: str, **params: str) -> str:
    body = "".join(f"{NS}<{k}>{v}{NS}</{k}>" for k, v in params.items())
    return f'{NS}<invoke name="{name}">{body}{NS}</invoke>\n'


def test_custom_command_plan_and_nested_subagent(repo, m3home, tmp_path):
    (repo / ".m3agent/commands").mkdir(parents=True)
    (repo / ".m3agent/commands/audit.md").write_text(
        "---\ndescription: Review a file for bugs\n---\nReview $ARGUMENTS for bugs.\n"
    )
    plan = [
        {"step": "read calc.py", "status": "completed"},
        {"step": "ask a reviewer", "status": "in_progress"},
    ]
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                f"</mm:think>{NS}<tool_call>\n"
                + invoke("update_plan", plan=json.dumps(plan))
                + invoke("task", description="second opinion", prompt="Is add() right?")
                + f"{NS}</tool_call>",
                "</mm:think>The child says add subtracts.",
                "</mm:think>Review finished: add() subtracts.",
            ]
        )
    )
    with Tmux() as tmux:
        tmux.start(scripted_command(repo, script, m3home))
        tmux.wait_for("Ask m3agent")
        tmux.wait_loaded(poll_s=0.05)
        tmux.type("/aud")  # /review is a built-in, which a project command cannot replace
        tmux.wait_for("Review a file for bugs")  # the custom command is in the menu
        tmux.type("it src/calc.py")
        tmux.press("Enter")
        tmux.wait_for("Review finished")
        screen = tmux.screen()
        assert "plan 1/2" in screen and "ask a reviewer" in screen  # pinned
        assert "↳ subagent general-purpose" in screen
        assert "The child says add subtracts." in screen
        from m3agent.agent.conversation import Conversation

        users = [
            m.content
            for log in (m3home / "sessions").glob("*.jsonl")
            for m in Conversation.load(m3home / "sessions", log.stem).messages
            if m.role == "user"
        ]
        assert "Review src/calc.py for bugs." in users  # the command's body, expanded
        tmux.quit()


def test_compact_fires_pre_compact_hook(repo, m3home, tmp_path):
    import sys

    log = tmp_path / "compact.log"
    hook = f"{sys.executable} -c \"import sys; open({str(log)!r}, 'a').write(sys.stdin.read())\""
    (m3home / "settings.json").write_text(
        json.dumps({"hooks": {"PreCompact": [{"hooks": [{"command": hook}]}]}})
    )
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["</mm:think>The summary."]))
    with Tmux() as tmux:
        tmux.start(scripted_command(repo, script, m3home))
        tmux.wait_for("Ask m3agent")
        tmux.wait_loaded(poll_s=0.05)
        tmux.type("/compact")
        tmux.press("Enter")
        tmux.wait_for("PreCompact")  # the hook's run is shown as a notice
        event = json.loads(log.read_text())
        assert event["hook_event_name"] == "PreCompact" and event["trigger"] == "manual"
        tmux.quit()
