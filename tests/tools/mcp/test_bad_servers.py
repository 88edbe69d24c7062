"""Servers that crash, hang, cannot start, or answer garbage: the model gets a clear error
result, and the next call starts the server again."""

from __future__ import annotations

import os
import time

import pytest
from m3agent.agent import events as ev
from m3agent.app.settings import load_settings
from m3agent.tools.mcp import mcp_hub
from mcp_support import answer, calls, finished, invoke, of_type


@pytest.fixture
def then_add(home, repo, server, user_config, stdio_config, open_session):
    """then_add(first, a=1, b=2, **table): a session on the demo server (its config table
    with TABLE) whose model calls the tool FIRST, then add(A, B), then answers "ok"."""

    def open_(first: str, a: int = 1, b: int = 2, **table):
        user_config(stdio_config("demo", server, **table))
        script = [
            calls(invoke(f"mcp__demo__{first}")),
            calls(invoke("mcp__demo__add", a=a, b=b)),
            answer("ok"),
        ]
        return open_session(load_settings(), repo, script)

    return open_


def test_crash_is_an_error_result_and_the_next_call_restarts(then_add, drive):
    session = then_add("crash")
    events, done = drive(session, "crash it")
    crash, add = finished(events)
    assert crash.is_error and crash.metadata["mcp_failure"]
    assert "MCP server demo: closed the connection" in crash.output
    assert not add.is_error and add.output.startswith("3")
    (status,) = mcp_hub(session.toolset).statuses()
    assert status.restarts == 1


def test_a_server_that_died_between_calls_is_started_again_for_the_next(then_add, drive):
    session = then_add("die_soon")

    def decide(req):
        if req.name == "mcp__demo__add":
            time.sleep(1.0)  # the server is gone by now
        return "approve"

    events, _ = drive(session, "go", decide=decide)
    bye, add = finished(events)
    assert bye.output == "bye"
    assert not add.is_error and add.output.startswith("3")  # not blamed on this call
    assert mcp_hub(session.toolset).statuses()[0].restarts == 1


def test_hang_times_out_and_the_next_call_restarts(then_add, drive):
    session = then_add("hang", a=2, b=2, tool_timeout_sec=1)
    started = time.monotonic()
    events, done = drive(session, "hang")
    hang, add = finished(events)
    assert hang.is_error and "did not answer within 1s" in hang.output
    assert not add.is_error and add.output.startswith("4")
    assert time.monotonic() - started < 20
    assert mcp_hub(session.toolset).statuses()[0].restarts == 1


def test_garbage_on_stdout_is_reported_at_once(
    home, repo, garbage_server, user_config, stdio_config, open_session, drive
):
    user_config(stdio_config("junk", garbage_server, tool_timeout_sec=30))
    script = [calls(invoke("mcp__junk__talk")), answer("broken")]
    session = open_session(load_settings(), repo, script)
    started = time.monotonic()
    events, _ = drive(session, "talk")
    (talk,) = finished(events)
    assert talk.is_error and "sent something that is not JSON-RPC" in talk.output
    assert time.monotonic() - started < 10  # not the 30 s timeout


def test_not_executable_is_named_at_start_and_its_tools_are_absent(
    home, repo, user_config, open_session, drive
):
    script_path = repo / ".servers" / "noexec.sh"
    script_path.parent.mkdir()
    script_path.write_text("#!/bin/sh\necho hi\n")
    os.chmod(script_path, 0o644)
    user_config(f'[mcp_servers.noexec]\ncommand = "{script_path}"\nstartup_timeout_sec = 10\n')
    session = open_session(
        load_settings(), repo, [calls(invoke("mcp__noexec__anything")), answer("none")]
    )
    assert not [n for n in session.toolset.names() if n.startswith("mcp__")]
    events, done = drive(session, "try")
    (err,) = [e for e in of_type(events, ev.Error) if "noexec" in e.message]
    assert "cannot run" in err.message and "Permission denied" in err.message
    assert "its tools are not in this session" in err.message
    (res,) = finished(events)
    assert res.is_error and "unknown tool 'mcp__noexec__anything'" in res.output
    assert done.reason == "done"


def test_missing_command_fails_the_start_with_its_stderr(home, repo, user_config, open_session):
    user_config('[mcp_servers.ghost]\ncommand = "/no/such/server"\n')
    session = open_session(load_settings(), repo, [answer("x")])
    (status,) = mcp_hub(session.toolset).statuses()
    assert status.state.value == "failed"
    assert "cannot run /no/such/server: No such file or directory" in status.detail
