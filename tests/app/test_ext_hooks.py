"""Hooks (issue 23) through the installed CLI: scripts in Claude Code's shape get the event as
JSON on stdin and answer by exit code or JSON; project hooks run only once trusted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

PY = sys.executable


def hook_script(tmp: Path, name: str, body: str) -> str:
    """A Python hook; `event` is the JSON it got on stdin, each run appended to NAME.log."""
    path = tmp / f"{name}.py"
    log = tmp / f"{name}.log"
    path.write_text(
        "import json, os, sys\n"
        "event = json.load(sys.stdin)\n"
        f"open({str(log)!r}, 'a').write(json.dumps(event) + '\\n')\n" + body
    )
    return f"{PY} {path}"


def write_settings(where: Path, hooks: dict) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    f = where / "settings.json"
    f.write_text(json.dumps({"hooks": hooks}))
    return f


def logged(tmp: Path, name: str) -> list[dict]:
    p = tmp / f"{name}.log"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def run(cli, repo, script, *extra):
    r = cli.run(
        "run", "do it", "--engine", "scripted", "--script", str(script),
        "--output-format", "stream-json", "--cwd", str(repo), "--no-context", *extra,
    )  # fmt: skip
    return r, [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


def session_log(home: Path, sid: str) -> list[dict]:
    from m3agent.agent.conversation import Conversation

    conv = Conversation.load(home / "sessions", sid)
    return [{"role": m.role, "content": m.content} for m in conv.messages]


def test_pre_tool_use_exit_2_blocks_and_the_model_reads_why(cli, repo, home, m3, tmp_path):
    cmd = hook_script(tmp_path, "guard", "sys.stderr.write('no shell today'); sys.exit(2)\n")
    write_settings(home, {"PreToolUse": [{"matcher": "shell", "hooks": [{"command": cmd}]}]})
    script = cli.script(
        m3.calls(m3.invoke("shell", command="echo hi > made.txt")),
        m3.answer("ok"),
    )
    r, evs = run(cli, repo, script, "--approval", "never")
    assert r.returncode == 0, r.stderr
    done = [e for e in evs if e["type"] == "tool_call_finished"][0]
    assert done["is_error"] and "no shell today" in done["output"]
    assert not (repo / "made.txt").exists()
    (event,) = logged(tmp_path, "guard")
    assert event["hook_event_name"] == "PreToolUse"
    assert event["tool_name"] == "shell"
    assert event["tool_input"] == {"command": "echo hi > made.txt"}
    assert event["session_id"] == evs[0]["session_id"] and event["cwd"] == str(repo)
    assert Path(event["transcript_path"]).is_file()
    tool_msgs = [m for m in session_log(home, evs[0]["session_id"]) if m["role"] == "tool"]
    assert "no shell today" in tool_msgs[0]["content"]  # what the model saw next
    hooks = [e for e in evs if e["type"] == "context" and e["action"] == "hook"]
    assert hooks[0]["detail"]["exit_code"] == 2


def test_json_answer_rewrites_input_and_adds_context(cli, repo, home, m3, tmp_path):
    rewrite = hook_script(
        tmp_path,
        "rewrite",
        "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PreToolUse',"
        " 'permissionDecision': 'allow', 'updatedInput': {'content': 'from the hook\\n'}}}))\n",
    )
    note = hook_script(
        tmp_path,
        "note",
        "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PostToolUse',"
        " 'additionalContext': 'remember to run the tests'}}))\n",
    )
    other = hook_script(tmp_path, "other", "")
    write_settings(
        home,
        {
            "PreToolUse": [
                {"matcher": "write_file|edit_file", "hooks": [{"command": rewrite}]},
                {"matcher": "mcp__.*", "hooks": [{"command": other}]},
            ],
            "PostToolUse": [{"matcher": "*", "hooks": [{"command": note}]}],
        },
    )
    script = cli.script(
        m3.calls(m3.invoke("write_file", path="new.txt", content="from the model\n")),
        m3.answer("written"),
    )
    r, evs = run(cli, repo, script)
    assert r.returncode == 0, r.stderr
    assert (repo / "new.txt").read_text() == "from the hook\n"
    out = [e for e in evs if e["type"] == "tool_call_finished"][0]["output"]
    assert "remember to run the tests" in out
    assert logged(tmp_path, "other") == []  # its matcher names MCP tools only
    assert logged(tmp_path, "note")[0]["tool_response"]["is_error"] is False


def test_claude_code_hook_scripts_work_as_written(cli, repo, home, m3, tmp_path):
    """Matchers and inputs in Claude Code's vocabulary: `Bash` is our shell, `Edit|Write` the
    file tools, `tool_input.file_path` our `path` (also when a hook rewrites it)."""
    bash = hook_script(
        tmp_path,
        "bash",
        "if 'rm ' in event['tool_input']['command']:\n"
        "    sys.stderr.write('rm is not allowed'); sys.exit(2)\n",
    )
    redirect = hook_script(
        tmp_path,
        "redirect",
        "p = event['tool_input']['file_path']\n"
        "print(json.dumps({'hookSpecificOutput': {'hookEventName': 'PreToolUse',"
        " 'updatedInput': {'file_path': 'safe/' + p}}}))\n",
    )
    write_settings(
        home,
        {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"command": bash}]},
                {"matcher": "Edit|Write", "hooks": [{"command": redirect}]},
            ]
        },
    )
    (repo / "keep.txt").write_text("kept\n")
    (repo / "safe").mkdir()
    script = cli.script(
        m3.calls(
            m3.invoke("shell", command="rm keep.txt"),
            m3.invoke("write_file", path="out.txt", content="hello\n"),
        ),
        m3.answer("done"),
    )
    r, evs = run(cli, repo, script, "--approval", "never")
    assert r.returncode == 0, r.stderr
    assert (repo / "keep.txt").exists()  # the Bash matcher fired and blocked
    assert (repo / "safe" / "out.txt").read_text() == "hello\n" and not (repo / "out.txt").exists()
    (written,) = logged(tmp_path, "redirect")
    assert written["tool_name"] == "write_file"
    assert written["tool_input"]["file_path"] == "out.txt" == written["tool_input"]["path"]
    assert [e["tool_input"]["command"] for e in logged(tmp_path, "bash")] == ["rm keep.txt"]


def test_claude_code_matchers_control():
    """Control: the same regular expressions over our names alone match nothing."""
    import re

    from m3agent.agent.hooks.config import HookMatcher

    for matcher, tool in (("Bash", "shell"), ("Edit|Write", "write_file"), ("Read", "read_file")):
        assert re.fullmatch(matcher, tool) is None
        assert HookMatcher(matcher, ()).matches(tool)
    assert not HookMatcher("Bash", ()).matches("write_file")
    assert HookMatcher("mcp__git__.*", ()).matches("mcp__git__log")


def test_prompt_session_start_stop_and_scrubbed_env(cli, repo, home, m3, tmp_path):
    ctx = hook_script(tmp_path, "ctx", "print('the build is green')\n")
    start = hook_script(tmp_path, "start", "print('SessionStart says hello')\n")
    env_dump = tmp_path / "env.json"
    stop = hook_script(
        tmp_path,
        "stop",
        f"open({str(env_dump)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
        "if not event['stop_hook_active']:\n"
        "    print(json.dumps({'decision': 'block', 'reason': 'also update the changelog'}))\n",
    )
    write_settings(
        home,
        {
            "UserPromptSubmit": [{"hooks": [{"command": ctx}]}],
            "SessionStart": [{"hooks": [{"command": start}]}],
            "Stop": [{"hooks": [{"command": stop}]}],
        },
    )
    script = cli.script(m3.answer("first answer"), m3.answer("changelog updated"))
    cli_env = cli.env
    cli.env = lambda: {**cli_env(), "MY_SERVICE_TOKEN": "s3cret", "PLAIN_VALUE": "x"}
    r, evs = run(cli, repo, script)
    assert r.returncode == 0, r.stderr
    assert evs[-1]["answer"] == "changelog updated"
    assert sum(e["type"] == "model_request_finished" for e in evs) == 2
    msgs = session_log(home, evs[0]["session_id"])
    user = [m["content"] for m in msgs if m["role"] == "user"]
    assert "the build is green" in user[0] and "SessionStart says hello" in user[0]
    assert user[0].startswith("do it")
    assert user[1] == "Stop hook: also update the changelog"
    assert [e["stop_hook_active"] for e in logged(tmp_path, "stop")] == [False, True]
    env = json.loads(env_dump.read_text())
    assert "MY_SERVICE_TOKEN" not in env and "PLAIN_VALUE" not in env
    assert env["M3AGENT_PROJECT_DIR"] == str(repo) == env["CLAUDE_PROJECT_DIR"]
    assert "PATH" in env


def test_blocked_prompt_timeout_and_notification(cli, repo, home, m3, tmp_path):
    block = hook_script(
        tmp_path,
        "block",
        "if 'password' in event['prompt']:\n    sys.stderr.write('no secrets'); sys.exit(2)\n",
    )
    slow = hook_script(tmp_path, "slow", "import time; time.sleep(20)\n")
    notify = hook_script(tmp_path, "notify", "")
    write_settings(
        home,
        {
            "UserPromptSubmit": [{"hooks": [{"command": block}]}],
            "PreToolUse": [{"matcher": "shell", "hooks": [{"command": slow, "timeout": 0.5}]}],
            "Notification": [{"hooks": [{"command": notify}]}],
        },
    )
    script = cli.script(m3.answer("never"))
    r = cli.run(
        "run", "my password is x", "--engine", "scripted", "--script", str(script),
        "--output-format", "stream-json", "--cwd", str(repo), "--no-context",
    )  # fmt: skip
    evs = m3.events(r.stdout)
    assert evs[-1]["reason"] == "blocked"
    assert any(e["type"] == "error" and "no secrets" in e["message"] for e in evs)
    assert not any(e["type"] == "model_request_finished" for e in evs)

    # A hook past its timeout is killed and reported; the call is not blocked by it. The
    # approval that follows (headless: nobody to answer) fires Notification.
    script = cli.script(m3.calls(m3.invoke("shell", command="echo hi")), m3.answer("done"))
    r, evs = run(cli, repo, script, "--approval", "untrusted")
    errors = [e["message"] for e in evs if e["type"] == "error"]
    assert any("timed out" in m for m in errors), errors
    hook_runs = [e["detail"] for e in evs if e["type"] == "context" and e["action"] == "hook"]
    slow_run = [d for d in hook_runs if d["event"] == "PreToolUse"][0]
    assert slow_run["timed_out"] and slow_run["duration_s"] < 10
    (note,) = logged(tmp_path, "notify")
    assert note["hook_event_name"] == "Notification" and "shell" in note["message"]


def test_project_hooks_run_only_after_trust(cli, repo, home, m3, tmp_path):
    """Trusted, a project's hook runs, in the tool sandbox: the workspace is writable, the
    directory beside it is not (agent/hooks/confined.py)."""
    marker, outside = repo / "ran.txt", tmp_path / "outside.txt"
    cmd = f"{PY} -c \"open('ran.txt', 'a').write('x')\"; touch {outside} 2>/dev/null; exit 0"
    write_settings(repo / ".m3agent", {"UserPromptSubmit": [{"hooks": [{"command": cmd}]}]})
    r, evs = run(cli, repo, cli.script(m3.answer("a")))
    assert r.returncode == 0, r.stderr
    assert not marker.exists()
    warn = [e["message"] for e in evs if e["type"] == "error" and e["kind"] == "hook"]
    assert warn and "not trusted" in warn[0] and cmd in warn[0]  # the command line is shown

    listed = cli.run("hooks", "list", "--cwd", str(repo))
    assert cmd in listed.stdout and "not trusted" in listed.stdout
    assert listed.stdout.startswith("project  sandbox  UserPromptSubmit")
    refused = cli.run("hooks", "trust", "--cwd", str(repo))  # no terminal, no --yes
    assert refused.returncode != 0
    ok = cli.run("hooks", "trust", "--cwd", str(repo), "--yes")
    assert ok.returncode == 0 and cmd in ok.stdout, ok.stderr
    run(cli, repo, cli.script(m3.answer("b")))
    assert marker.read_text() == "x" and not outside.exists()

    # Any change to the project's hooks needs trust again.
    write_settings(
        repo / ".m3agent", {"UserPromptSubmit": [{"hooks": [{"command": cmd + " # new"}]}]}
    )
    run(cli, repo, cli.script(m3.answer("c")))
    assert marker.read_text() == "x"


@pytest.mark.parametrize(
    ("matcher", "tool", "hit"),
    [
        ("mcp__git__.*", "mcp__git__status", True),
        ("mcp__git__.*", "mcp__other__status", False),
        ("shell", "shell_extra", False),
        ("", "anything", True),
    ],
)
def test_matchers_are_anchored_regexes(matcher, tool, hit):
    from m3agent.agent.hooks import HookEvent, parse_hooks

    hooks = parse_hooks({"PreToolUse": [{"matcher": matcher, "hooks": [{"command": "true"}]}]}, "t")
    assert bool(hooks.commands(HookEvent.PRE_TOOL_USE, tool)) is hit


def test_bad_settings_are_one_clear_line():
    from m3agent.agent.hooks import parse_hooks

    with pytest.raises(ValueError, match="unknown hook event 'PreTool'"):
        parse_hooks({"PreTool": []}, "s.json")
    with pytest.raises(ValueError, match="timeout"):
        parse_hooks({"Stop": [{"hooks": [{"command": "x", "timeout": -1}]}]}, "s.json")


def test_the_task_tools_claude_name_is_the_one_the_table_holds():
    """tools/claude_names.py cannot import agent/: its entry for `task` must say what the
    tool itself declares."""
    from m3agent.agent.subagents.task_tool import TaskTool
    from m3agent.tools.claude_names import claude_names_of, tools_named

    assert claude_names_of("task") == TaskTool.claude_names
    assert tools_named("TodoWrite") == ("update_plan",)
