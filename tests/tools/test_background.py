"""Background commands (tools/background.py, shell's run_in_background, shell_output,
shell_kill): real commands under the real sandbox, synchronised through files the test
creates, never through sleeps it hopes are long enough."""

from __future__ import annotations

import os
import resource
import threading
import time

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
from m3agent.tools.toolset import background_jobs, default_toolset

WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.02; done"
TICKER = "while true; do echo x >> ticks; sleep 0.02; done"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    ws = tmp_path_factory.mktemp("bgws")
    sb = Sandbox(SandboxPolicy(workspace=ws))
    if not sb.report.protective:
        pytest.skip("no sandbox layer works here")
    return sb


@pytest.fixture
def tools(sandbox, tmp_path):
    ts = default_toolset()
    ws = sandbox.policy.workspace / tmp_path.name  # writable for the commands
    ws.mkdir()
    yield ts, ToolContext(cwd=ws, sandbox=sandbox), ws
    ts.close()


def _until(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _still(path, for_s=0.3) -> bool:
    """Whether the file stops growing (nothing writes to it any more)."""
    before = path.stat().st_size
    time.sleep(for_s)
    return path.stat().st_size == before


def test_start_read_new_output_then_wait_for_the_end(tools):
    ts, ctx, ws = tools
    r = ts.dispatch(
        "shell",
        {
            "command": f"echo start; echo warn >&2; {WAIT_FOR_GO}; echo done; exit 3",
            "run_in_background": True,
        },
        ctx,
    )
    assert not r.is_error and r.metadata["background_id"] == "b1", r.output
    assert "started in the background as b1" in r.output
    seen: list[str] = []

    def read() -> bool:
        seen.append(ts.dispatch("shell_output", {"job_id": "b1"}, ctx).output)
        text = "".join(seen)
        return "stdout (new):\nstart" in text and "stderr (new):\nwarn" in text

    _until(read)
    # what was read is not read again: the next read has nothing new
    again = ts.dispatch("shell_output", {"job_id": "b1"}, ctx)
    assert again.metadata["status"] == "running" and "(no new output)" in again.output
    (ws / "go").touch()
    end = ts.dispatch("shell_output", {"job_id": "b1", "wait_s": 20}, ctx)
    assert end.metadata["status"] == "exit 3" and end.metadata["exit_code"] == 3
    assert end.output.split("\n", 1)[1] == "stdout (new):\ndone"  # start was read before
    assert ts.dispatch("shell_output", {"job_id": "1"}, ctx).metadata["background_id"] == "b1"
    listing = ts.dispatch("shell_output", {}, ctx).output
    assert listing.startswith("b1: exit 3 after ") and "echo start" in listing


def test_filter_keeps_matching_lines(tools):
    ts, ctx, _ = tools
    ts.dispatch(
        "shell", {"command": "printf 'ok 1\\nFAIL 2\\nok 3\\n'", "run_in_background": True}, ctx
    )
    r = ts.dispatch("shell_output", {"job_id": "b1", "wait_s": 20, "filter": "FAIL"}, ctx)
    assert "FAIL 2" in r.output and "ok 1" not in r.output
    bad = ts.dispatch("shell_output", {"job_id": "b1", "filter": "("}, ctx)
    assert bad.is_error and "not a regular expression" in bad.output


def test_kill_ends_the_whole_tree(tools):
    ts, ctx, ws = tools
    ts.dispatch("shell", {"command": f"({TICKER}) & wait", "run_in_background": True}, ctx)
    _until(lambda: (ws / "ticks").exists())
    r = ts.dispatch("shell_kill", {"job_id": "b1"}, ctx)
    assert not r.is_error and r.output.startswith("stopped b1: stopped after"), r.output
    assert _still(ws / "ticks")
    assert "had already ended (stopped)" in ts.dispatch("shell_kill", {"job_id": "b1"}, ctx).output


def test_unknown_id_names_the_known_ones(tools):
    ts, ctx, _ = tools
    r = ts.dispatch("shell_output", {"job_id": "b9"}, ctx)
    assert r.is_error and r.output == "no background command 'b9' (there are: none)"
    r = ts.dispatch("shell_kill", {"job_id": "b9"}, ctx)
    assert r.is_error and "no background command 'b9'" in r.output
    assert ts.dispatch("shell_output", {}, ctx).output == "no background commands"


def test_closing_the_toolset_kills_running_jobs(sandbox, tmp_path):
    ts, ws = default_toolset(), sandbox.policy.workspace / tmp_path.name
    ws.mkdir()
    ctx = ToolContext(cwd=ws, sandbox=sandbox)
    ts.dispatch("shell", {"command": TICKER, "run_in_background": True}, ctx)
    _until(lambda: (ws / "ticks").exists())
    ts.close()  # the session's end
    assert _still(ws / "ticks")
    (job,) = background_jobs(ts).jobs()
    assert job.status() == "stopped"


def test_ctrl_b_moves_a_waiting_call_to_the_background(tools):
    ts, ctx, ws = tools
    out: list = []
    call = threading.Thread(
        target=lambda: out.append(
            ts.dispatch("shell", {"command": f"echo first; {WAIT_FOR_GO}; echo second"}, ctx)
        )
    )
    call.start()
    jobs = background_jobs(ts)
    _until(lambda: jobs._jobs)  # the foreground job exists (f1)
    assert jobs.jobs() == []  # not a background one yet
    (sent,) = jobs.send_to_background()
    call.join(10)
    (r,) = out
    assert not r.is_error and r.metadata["background_id"] == sent.id == "b1"
    assert "moved to the background by the user as b1" in r.output
    (ws / "go").touch()
    end = ts.dispatch("shell_output", {"job_id": "b1", "wait_s": 20}, ctx)
    assert end.metadata["status"] == "exit 0"
    assert "first" in end.output and "second" in end.output


def test_interrupting_a_foreground_call_still_kills_it(tools):
    ts, ctx, ws = tools
    out: list = []
    call = threading.Thread(
        target=lambda: out.append(ts.dispatch("shell", {"command": TICKER}, ctx))
    )
    call.start()
    _until(lambda: (ws / "ticks").exists())
    ctx.cancel.set()
    call.join(15)
    (r,) = out
    assert r.is_error and "[interrupted; the command and its children were killed]" in r.output
    assert _still(ws / "ticks")
    assert background_jobs(ts)._jobs == {}  # a finished foreground job is not kept


def test_a_flood_of_output_is_read_in_bounded_pieces(tools):
    ts, ctx, _ = tools
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ts.dispatch(
        "shell",
        {
            "command": "head -c 20000000 /dev/zero | tr '\\0' 'y'; echo; echo END",
            "run_in_background": True,
        },
        ctx,
    )
    r = ts.dispatch("shell_output", {"job_id": "b1", "wait_s": 60}, ctx)
    assert r.metadata["status"] == "exit 0"
    assert len(r.output) < 40_000 and r.metadata["skipped_bytes"] > 19_000_000
    assert "bytes of output skipped" in r.output and r.output.rstrip().endswith("END")
    grew_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grew_mb < 50, f"the agent process grew by {grew_mb:.0f} MB"


def test_a_character_cut_by_a_read_is_held_back(tools):
    ts, ctx, ws = tools
    # "é" is two bytes: the first read ends between them, the second completes it
    ts.dispatch(
        "shell",
        {
            "command": f"printf 'caf\\303'; {WAIT_FOR_GO}; printf '\\251!'",
            "run_in_background": True,
        },
        ctx,
    )
    jobs = background_jobs(ts)
    out = jobs.get("b1").capture.out.fileno()  # fstat: the command's write offset stays put
    _until(lambda: os.fstat(out).st_size >= 4)
    first = ts.dispatch("shell_output", {"job_id": "b1"}, ctx).output
    assert "caf" in first and "\ufffd" not in first
    (ws / "go").touch()
    second = ts.dispatch("shell_output", {"job_id": "b1", "wait_s": 20}, ctx).output
    assert "stdout (new):\né!" in second


def test_without_a_sandbox_nothing_starts_in_the_background(tmp_path):
    from m3agent.tools.sandbox.policy import LAYERS

    bare = Sandbox(SandboxPolicy(workspace=tmp_path, disabled_layers=frozenset(LAYERS)))
    ts = default_toolset()
    ctx = ToolContext(cwd=tmp_path, sandbox=bare)
    r = ts.dispatch("shell", {"command": "touch ran", "run_in_background": True}, ctx)
    assert r.is_error and r.metadata["blocked_by"] == "no_sandbox", r.output
    assert "no sandbox layer is available" in r.output and not (tmp_path / "ran").exists()
    r = ts.dispatch("shell", {"command": "touch ran"}, ctx)  # the foreground says the same
    assert r.is_error and r.metadata["blocked_by"] == "no_sandbox"


def test_ends_the_model_has_not_seen_are_reported_once(tools):
    from m3agent.tools.background import ended_report

    ts, ctx, ws = tools
    jobs = background_jobs(ts)
    for command in ("echo one; exit 4", "echo two", "sleep 60"):
        ts.dispatch("shell", {"command": command, "run_in_background": True}, ctx)
    ts.dispatch("shell_output", {"job_id": "b2", "wait_s": 20}, ctx)  # the model saw b2 end
    jobs.get("b1").wait(20)
    ts.dispatch("shell_kill", {"job_id": "b3"}, ctx)  # the model stopped b3 itself
    report = ended_report(jobs)
    assert report.startswith("b1 ended (exit 4) after ") and report.count("\n") == 0, report
    assert report.endswith("echo one; exit 4; 4 bytes of output unread (shell_output job_id 'b1')")
    assert ended_report(jobs) == ""  # once
