"""`m3agent run` end to end, as a real subprocess, in a temporary git repository."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
from m3agent.agent.conversation import Conversation
from m3agent.app import exit_codes
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox


def _sandbox_works(repo) -> bool:
    return Sandbox(SandboxPolicy(workspace=repo)).report.protective


def test_edit_and_shell_stream_json_then_resume(cli, repo, home, m3):
    script = cli.script(
        m3.calls(
            m3.invoke("edit_file", path="greet.py", old_string='"helo"', new_string='"hello"'),
            m3.invoke("shell", command="python3 -c 'import greet; print(greet.greet())'"),
            reasoning="The greeting is misspelt; fix it, then run it.",
            before="Fixing the typo.",
        ),
        m3.answer("Fixed the typo; greet() now returns hello.", reasoning="It printed hello."),
    )
    r = cli.run_scripted(
        "fix the greeting", script, repo, "--output-format", "stream-json", "--thinking", "enabled"
    )
    assert r.returncode == 0, r.stderr
    assert (repo / "greet.py").read_text() == 'def greet():\n    return "hello"\n'
    evs = m3.events(r.stdout)
    assert all(e["v"] == 1 for e in evs)
    types = [e["type"] for e in evs]
    assert types[0] == "session_started" and types[-2:] == ["turn_complete", "result"]
    for t in (
        "turn_started",
        "reasoning_delta",
        "content_delta",
        "tool_call_started",
        "tool_call_finished",
        "model_request_finished",
    ):
        assert t in types, t
    reasoning = "".join(e["text"] for e in evs if e["type"] == "reasoning_delta")
    assert reasoning == "The greeting is misspelt; fix it, then run it.It printed hello."
    started = [e for e in evs if e["type"] == "tool_call_started"]
    assert [e["name"] for e in started] == ["edit_file", "shell"]
    assert started[0]["arguments"] == {
        "path": "greet.py",
        "old_string": '"helo"',
        "new_string": '"hello"',
    }
    finished = [e for e in evs if e["type"] == "tool_call_finished"]
    assert not finished[0]["is_error"]
    if _sandbox_works(repo):
        assert not finished[1]["is_error"] and "hello" in finished[1]["output"], finished[1]
    done = evs[-2]  # the turn_complete line; the last one is the result
    assert done["reason"] == "done"
    assert done["answer"] == "Fixed the typo; greet() now returns hello."
    assert done["usage"]["prompt_tokens"] > 0
    assert done["last_usage"]["cached_prompt_tokens"] > 0

    # The session log resumes to the same conversation, and the run continues it.
    sid = evs[0]["session_id"]
    before = Conversation.load(home / "sessions", sid).messages
    # After the system message(s) (the prompt, and the repository snapshot when there is one):
    roles = [m.role for m in before]
    first_user = roles.index("user")
    assert set(roles[:first_user]) == {"system"}
    assert roles[first_user:] == ["user", "assistant", "tool", "tool", "assistant"]
    script2 = cli.script(m3.answer("Nothing else to do."))
    r2 = cli.run(
        "run",
        "anything else?",
        "--engine",
        "scripted",
        "--script",
        str(script2),
        "--output-format",
        "json",
        "--resume",
        sid,
    )
    assert r2.returncode == 0, r2.stderr
    out = json.loads(r2.stdout)
    assert out["session_id"] == sid and out["answer"] == "Nothing else to do."
    assert out["turns"] == 1 and out["tool_calls"] == 0 and out["reason"] == "done"
    # The new engine call re-used the cached prefix: the whole first conversation.
    assert out["usage"]["cached_prompt_tokens"] == 0  # a fresh process has an empty cache
    after = Conversation.load(home / "sessions", sid).messages
    assert after[: len(before)] == before
    assert [m.role for m in after[len(before) :]] == ["user", "assistant"]


def test_text_output_answer_on_stdout_progress_on_stderr(cli, repo, m3):
    script = cli.script(
        m3.calls(m3.invoke("read_file", path="greet.py")),
        m3.answer("greet returns helo."),
    )
    r = cli.run_scripted("what does greet return?", script, repo)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "greet returns helo.\n"
    assert "read_file" in r.stderr and "[done]" in r.stderr


def test_max_turns_exits_4(cli, repo, m3):
    loop = m3.calls(m3.invoke("list_dir", path="."))
    script = cli.script(loop, loop, loop)
    r = cli.run_scripted("go", script, repo, "--max-turns", "2", "--output-format", "json")
    assert r.returncode == exit_codes.TURN_LIMIT, r.stderr
    out = json.loads(r.stdout)
    assert out["reason"] == "max_turns" and out["turns"] == 2 and out["tool_calls"] == 2


def test_headless_without_tty_denies_and_the_model_sees_it(cli, repo, m3):
    script = cli.script(
        m3.calls(m3.invoke("write_file", path="x.txt", content="hi")),
        m3.answer("I was not allowed."),
    )
    r = cli.run_scripted(
        "write", script, repo, "--approval", "untrusted", "--output-format", "stream-json"
    )
    assert r.returncode == 0, r.stderr
    evs = m3.events(r.stdout)
    assert any(e["type"] == "approval_request" for e in evs)
    fin = [e for e in evs if e["type"] == "tool_call_finished"][0]
    assert fin["is_error"] and "headless" in fin["output"]
    assert not (repo / "x.txt").exists()


def test_refused_remote_exits_3(cli, repo):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    r = cli.run(
        "run",
        "hi",
        "--engine",
        "remote",
        "--base-url",
        f"http://127.0.0.1:{port}/v1",
        "--cwd",
        str(repo),
    )
    assert r.returncode == exit_codes.ENGINE_UNAVAILABLE
    assert f"cannot reach http://127.0.0.1:{port}: connection refused" in r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "scripted"], "needs --script"),
        (["--engine", "warp"], "unknown engine"),
        (["--output-format", "xml"], "unknown output format"),
        (["--thinking", "maybe"], "thinking mode"),
        (["--approval", "sometimes"], "approval policy"),
        (["--resume", "nope"], "no session 'nope'"),
        (["--engine", "native"], "needs --model"),
    ],
)
def test_usage_errors_exit_2(cli, repo, args, message):
    r = cli.run("run", "hi", "--cwd", str(repo), *args)
    assert r.returncode == exit_codes.USAGE_ERROR, (r.stdout, r.stderr)
    assert message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1  # one clear line


def test_sigint_interrupts_and_exits_130(cli, repo, m3, tmp_path):
    script = cli.script(m3.calls(m3.invoke("shell", command="sleep 60")), m3.answer("x"))
    if not _sandbox_works(repo):
        pytest.skip("no sandbox layer here: shell would not run")
    p = cli.popen_scripted("wait", script, repo, "--output-format", "stream-json")
    try:
        deadline = time.monotonic() + 60
        line = ""
        while time.monotonic() < deadline:
            line = p.stdout.readline()
            if '"tool_call_started"' in line or not line:
                break
        assert '"tool_call_started"' in line
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == exit_codes.INTERRUPTED, err
    *_, done, last = (json.loads(x) for x in out.strip().splitlines())
    assert done["type"] == "turn_complete" and done["reason"] == "interrupted"
    assert last["type"] == "result" and last["reason"] == "interrupted"


def test_sessions_lists_runs(cli, repo, m3):
    script = cli.script(m3.answer("hi there"))
    r = cli.run_scripted("say hi", script, repo, "--output-format", "json")
    assert r.returncode == 0, r.stderr
    sid = json.loads(r.stdout)["session_id"]
    listed = cli.run("sessions")
    assert listed.returncode == 0
    line = listed.stdout.splitlines()[0]
    assert line.startswith(sid) and str(repo) in line and "say hi" in line
    js = cli.run("sessions", "--json")
    assert json.loads(js.stdout.splitlines()[0])["first_prompt"] == "say hi"


def test_subprocess_import_is_light(cli):
    # `m3agent --help` must not pay for torch or the engines.
    r = subprocess.run(
        [__import__("sys").executable, "-X", "importtime", "-m", "m3agent.app.cli", "--help"],
        env=cli.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0
    assert "torch" not in r.stderr and "httpx" not in r.stderr


def test_checkpoint_before_the_first_edit_and_undo(cli, repo, m3):
    original = (repo / "greet.py").read_text()
    script = cli.script(
        m3.calls(
            m3.invoke("edit_file", path="greet.py", old_string='"helo"', new_string='"hi"'),
            m3.invoke("write_file", path="new.txt", content="x"),
        ),
        m3.answer("done"),
    )
    r = cli.run_scripted("edit", script, repo, "--output-format", "stream-json")
    assert r.returncode == 0, r.stderr
    cps = [e for e in m3.events(r.stdout) if e["type"] == "context" and e["action"] == "checkpoint"]
    assert len(cps) == 1  # once per turn, before the first mutating call
    assert (repo / "greet.py").read_text() != original and (repo / "new.txt").exists()
    u = cli.run("undo", "--cwd", str(repo))
    assert u.returncode == 0, u.stderr
    assert (repo / "greet.py").read_text() == original
    assert not (repo / "new.txt").exists()


def test_missing_image_is_a_usage_error(cli, repo):
    r = cli.run(
        "run",
        "look",
        "--engine",
        "scripted",
        "--script",
        "x.json",
        "--cwd",
        str(repo),
        "--image",
        "nope.png",
    )
    assert r.returncode == exit_codes.USAGE_ERROR
    assert "nope.png" in r.stderr


@pytest.mark.slow
def test_run_native_engine_on_a_tiny_random_checkpoint(cli, repo, home, tmp_path):
    """The factory's native wiring: a random tiny M3 answers gibberish, but end to end."""
    model = tmp_path / "tiny"
    made = cli.run(
        "model", "init-tiny", str(model), "--layers", "2", "--hidden", "128", "--experts", "2"
    )
    assert made.returncode == 0, made.stderr
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('max_tokens = 8\ndevice = "cpu"\n')
    r = cli.run(
        "run",
        "hi",
        "--engine",
        "native",
        "--model",
        str(model),
        "--cwd",
        str(repo),
        "--output-format",
        "json",
        "--max-turns",
        "1",
        "--in-process",  # the in-process wiring; app/test_warm_serve.py covers the server
        timeout=300,
    )
    assert r.returncode in (exit_codes.OK, exit_codes.TURN_LIMIT), r.stderr
    assert not (home / "serve").exists() and "m3agent serve" not in r.stderr
    out = json.loads(r.stdout)
    assert out["turns"] == 1 and out["usage"]["prompt_tokens"] > 0
    assert 0 < out["usage"]["generated_tokens"] <= 8


def test_native_engine_with_a_missing_model_dir_exits_3(cli, repo, tmp_path):
    r = cli.run(
        "run", "hi", "--engine", "native", "--model", str(tmp_path / "nope"), "--cwd", str(repo)
    )
    assert r.returncode == exit_codes.ENGINE_UNAVAILABLE
    assert "does not exist" in r.stderr
