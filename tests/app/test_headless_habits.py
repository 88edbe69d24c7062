"""Issue 22 item 5 and the headless habits: piped stdin beside a prompt, JSON errors before
the session starts, --ephemeral, the early unreachable-server check, --append-system-prompt,
--output-schema, --input-format stream-json, Claude Code's result fields. Through the installed
console script, with the scripted engine replaying M3 markup."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

M3AGENT = Path(sys.executable).with_name("m3agent")


def run(cli, *args, stdin: str = "", cwd=None):
    return subprocess.run(
        [str(M3AGENT), *args],
        env=cli.env(),
        capture_output=True,
        text=True,
        timeout=120,
        input=stdin,
        cwd=cwd,
    )


def scripted(cli, repo, *replies):
    return ["--engine", "scripted", "--script", str(cli.script(*replies)), "-C", str(repo)]


def logged_users(home: Path, session_id: str) -> list[str]:
    log = home / "sessions" / f"{session_id}.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    messages = [r["message"] for r in rows if r.get("kind") == "message"]
    return [m["content"] for m in messages if m.get("role") == "user"]


def test_piped_stdin_beside_a_prompt_reaches_the_model(cli, repo, home, m3):
    r = run(
        cli,
        "run",
        "review this",
        *scripted(cli, repo, m3.answer("looks fine")),
        "--output-format",
        "json",
        stdin="-    return 'helo'\n+    return 'hello'\n",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    users = logged_users(home, out["session_id"])
    assert users[-1].startswith("review this\n\n<stdin>\n")
    assert "+    return 'hello'" in users[-1] and users[-1].endswith("</stdin>")


def test_json_result_has_claude_code_fields(cli, repo, m3):
    r = run(cli, "run", "hi", *scripted(cli, repo, m3.answer("hello")), "--output-format", "json")
    out = json.loads(r.stdout)
    assert out["type"] == "result" and out["subtype"] == "success" and out["is_error"] is False
    assert out["result"] == "hello" and out["num_turns"] == 1
    assert isinstance(out["duration_ms"], int) and out["session_id"]


def test_max_turns_subtype(cli, repo, m3):
    loop = m3.calls(m3.invoke("read_file", path="greet.py"))
    r = run(cli, "run", "x", *scripted(cli, repo, loop, loop), "--max-turns", "1",
            "--output-format", "stream-json")  # fmt: skip
    assert r.returncode == 4
    last = json.loads(r.stdout.splitlines()[-1])
    assert last["type"] == "result" and last["subtype"] == "error_max_turns"


@pytest.mark.parametrize("fmt", ["json", "stream-json"])
def test_errors_before_the_session_print_json(cli, repo, fmt):
    r = run(cli, "run", "x", "--engine", "scripted", "-C", str(repo), "--output-format", fmt)
    assert r.returncode == 2
    out = json.loads(r.stdout)
    assert out["type"] == "result" and out["is_error"] is True and out["exit_code"] == 2
    assert "--script" in out["errors"][0]["message"]
    assert r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1


def test_unreachable_server_is_found_before_the_snapshot(cli, make_repo):
    # A large tree: the snapshot would take a while; the refusal comes first and says so.
    big = make_repo({f"m{i}.py": "x = 1\n" * 200 for i in range(300)})
    r = run(cli, "run", "x", "--engine", "remote", "--base-url", "http://127.0.0.1:9/v1",
            "-C", str(big), "--output-format", "json")  # fmt: skip
    assert r.returncode == 3, r.stderr
    assert "cannot reach http://127.0.0.1:9: connection refused" in r.stderr
    assert "snapshot" not in r.stderr
    assert json.loads(r.stdout)["errors"][0]["kind"] == "engine_unavailable"


def test_ephemeral_leaves_no_session(cli, repo, home, m3):
    r = run(cli, "run", "hi", *scripted(cli, repo, m3.answer("ok")), "--ephemeral",
            "--output-format", "json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    sid = json.loads(r.stdout)["session_id"]
    assert not list((home / "sessions").glob(f"{sid}*"))
    # without it the log stays (the control)
    r = run(cli, "run", "hi", *scripted(cli, repo, m3.answer("ok")), "--output-format", "json")
    assert (home / "sessions" / f"{json.loads(r.stdout)['session_id']}.jsonl").is_file()
    # and it never removes a session being continued
    r = run(cli, "run", "again", *scripted(cli, repo, m3.answer("ok")), "-c", "--ephemeral")
    assert r.returncode == 2 and "--ephemeral" in r.stderr


def test_append_system_prompt(cli, repo, home, m3):
    r = run(cli, "run", "hi", *scripted(cli, repo, m3.answer("ok")), "--append-system-prompt",
            "Always answer in French.", "--output-format", "json")  # fmt: skip
    sid = json.loads(r.stdout)["session_id"]
    rows = [json.loads(x) for x in (home / "sessions" / f"{sid}.jsonl").read_text().splitlines()]
    system = next(r["message"]["content"] for r in rows if r.get("kind") == "message")
    # the appended text follows the base prompt (the session's subagent and skill lists, when
    # there are any, come after it)
    assert system.startswith("You are m3agent") and "\n\nAlways answer in French." in system


def test_output_schema(cli, repo, tmp_path, m3):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "object", "required": ["ok"],
                                  "properties": {"ok": {"type": "boolean"}}}))  # fmt: skip
    good = run(cli, "run", "check", *scripted(cli, repo, m3.answer('{"ok": true}')),
               "--output-schema", str(schema), "--output-format", "json")  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert json.loads(good.stdout)["structured_output"] == {"ok": True}
    bad = run(cli, "run", "check", *scripted(cli, repo, m3.answer('{"ok": "yes"}')),
              "--output-schema", str(schema))  # fmt: skip
    assert bad.returncode == 1
    assert "error: the answer does not match --output-schema at ok" in bad.stderr
    schema.write_text("{nope")
    r = run(cli, "run", "check", *scripted(cli, repo, m3.answer("x")), "--output-schema",
            str(schema))  # fmt: skip
    assert r.returncode == 2 and "not JSON" in r.stderr


def test_input_format_stream_json_is_a_conversation(cli, repo, home, m3):
    lines = [
        {"type": "user", "message": {"role": "user", "content": "first question"}},
        {"type": "user", "message": {"role": "user",
                                     "content": [{"type": "text", "text": "second one"}]}},
    ]  # fmt: skip
    r = run(cli, "run", *scripted(cli, repo, m3.answer("one"), m3.answer("two")),
            "--input-format", "stream-json", "--output-format", "json",
            stdin="\n".join(json.dumps(x) for x in lines) + "\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["result"] == "two"
    assert logged_users(home, out["session_id"])[-2:] == ["first question", "second one"]
    r = run(cli, "run", *scripted(cli, repo, m3.answer("x")), "--input-format", "stream-json",
            stdin='{"type": "assistant"}\n')  # fmt: skip
    assert r.returncode == 2 and "line 1" in r.stderr


def _edit(m3):
    return m3.calls(
        m3.invoke("edit_file", path="greet.py", old_string='"helo"', new_string='"hello"')
    )


def test_permission_mode_plan_denies_changes_and_asks_for_a_plan(cli, repo, home, m3):
    r = run(cli, "run", "fix the greeting", *scripted(cli, repo, _edit(m3), m3.answer("1. fix")),
            "--permission-mode", "plan", "--approval", "never", "--output-format", "json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert '"helo"' in (repo / "greet.py").read_text()  # denied in plan mode
    out = json.loads(r.stdout)
    assert out["result"] == "1. fix"
    user = logged_users(home, out["session_id"])[-1]
    assert user.startswith("fix the greeting") and "<plan_mode>" in user
    # the control: the same run in default mode edits the file
    r = run(cli, "run", "fix", *scripted(cli, repo, _edit(m3), m3.answer("ok")),
            "--approval", "never")  # fmt: skip
    assert r.returncode == 0 and '"hello"' in (repo / "greet.py").read_text()


def test_accept_edits_and_tool_flags(cli, repo, m3):
    # untrusted asks before an edit; without a terminal that is a denial ...
    r = run(cli, "run", "fix", *scripted(cli, repo, _edit(m3), m3.answer("ok")),
            "--approval", "untrusted")  # fmt: skip
    assert '"helo"' in (repo / "greet.py").read_text()
    # ... acceptEdits lets file edits run without asking
    r = run(cli, "run", "fix", *scripted(cli, repo, _edit(m3), m3.answer("ok")),
            "--approval", "untrusted", "--permission-mode", "acceptEdits")  # fmt: skip
    assert r.returncode == 0 and '"hello"' in (repo / "greet.py").read_text()
    # --disallowed-tools denies even with --approval never; --allowed-tools allows
    read = m3.calls(m3.invoke("read_file", path="greet.py"))
    r = run(cli, "run", "read", *scripted(cli, repo, read, m3.answer("ok")), "--approval",
            "never", "--disallowed-tools", "read_file,grep", "--output-format", "stream-json")  # fmt: skip
    (done,) = [e for e in m3.events(r.stdout) if e["type"] == "tool_call_finished"]
    assert done["is_error"] and "denies the tool read_file" in done["output"]
    r = run(cli, "run", "x", *scripted(cli, repo, m3.answer("ok")), "--permission-mode", "nope")
    assert r.returncode == 2 and "unknown permission mode 'nope'" in r.stderr


def test_tool_messages_in_the_log_carry_is_error(cli, repo, home, m3):
    script = m3.calls(
        m3.invoke("read_file", path="missing.py"), m3.invoke("read_file", path="greet.py")
    )
    r = run(cli, "run", "read", *scripted(cli, repo, script, m3.answer("ok")), "--approval",
            "never", "--output-format", "json")  # fmt: skip
    sid = json.loads(r.stdout)["session_id"]
    rows = [json.loads(x) for x in (home / "sessions" / f"{sid}.jsonl").read_text().splitlines()]
    tools = [r for r in rows if r.get("kind") == "message" and r["message"]["role"] == "tool"]
    assert [t["is_error"] for t in tools] == [True, False]
    assert all("is_error" not in r for r in rows if r.get("kind") == "message"
               and r["message"]["role"] != "tool")  # fmt: skip


def test_a_pipe_nobody_writes_to_does_not_hang(cli, repo, m3):
    """An inherited stdin pipe that stays open and silent (CI runners) is not waited on."""
    import time

    p = subprocess.Popen(
        [str(M3AGENT), "run", "hi", *scripted(cli, repo, m3.answer("ok"))],
        env=cli.env(),
        stdin=subprocess.PIPE,  # kept open, never written
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    try:
        code = p.wait(timeout=60)
        out, err = p.stdout.read(), p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
        p.stdin.close()
    assert code == 0 and out == "ok\n", err
    assert "nothing on stdin within 3 s: not read" in err and time.monotonic() - started < 30
