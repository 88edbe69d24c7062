"""Diagnostics from a language server (tools/lsp/, tools/diagnostics.py): a real server
process (lsp_fake_server.py, real LSP framing on stdio) under the real sandbox, on the
files a real edit tool changed; one server for the session; a missing, crashing, slow or
flooding server costs a note, never the call's own result."""

from __future__ import annotations

import io
import os
import shutil
import sys
from pathlib import Path

import pytest
from m3agent.tools.base import ToolContext, ToolResult
from m3agent.tools.diagnostics import Diagnostics, DiagnosticsConfig
from m3agent.tools.lsp.framing import MAX_MESSAGE_BYTES, ProtocolError, encode, read_message
from m3agent.tools.lsp.pool import MAX_STARTS
from m3agent.tools.sandbox.policy import LAYERS, SandboxMode, SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
from m3agent.tools.toolset import default_toolset

SERVER = Path(__file__).with_name("lsp_fake_server.py")


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    sb = Sandbox(SandboxPolicy(workspace=tmp_path_factory.mktemp("lspws")))
    if not sb.report.protective:
        pytest.skip("no sandbox layer works here")
    return sb


@pytest.fixture
def ctx(sandbox, tmp_path):
    ws = sandbox.policy.workspace / tmp_path.name
    ws.mkdir()
    shutil.copy(SERVER, ws / "server.py")
    return ToolContext(cwd=ws, sandbox=sandbox)


def _diag(ctx, extra: str = "", **cfg) -> Diagnostics:
    cmd = f"{sys.executable} -I {ctx.cwd / 'server.py'}{extra}"
    return Diagnostics(DiagnosticsConfig(lsp={"txt": cmd}, **cfg))


def _write(ctx, path: str, content: str) -> ToolResult:
    return default_toolset().dispatch("write_file", {"path": path, "content": content}, ctx)


def test_a_servers_diagnostics_join_the_result_and_one_server_serves_the_session(ctx):
    diag = _diag(ctx)
    try:
        bad = diag.annotate(_write(ctx, "a.txt", "fine\nBAD line\n"), ctx)
        assert not bad.is_error
        found = bad.output.split("\n\n", 1)[1]
        assert found.startswith("[diagnostics for a.txt (language server `")
        assert found.endswith("a.txt:2:1: error: BAD is not allowed here [fake-lsp n1]")
        (meta,) = bad.metadata["diagnostics"]
        assert meta["language_server"] and meta["findings"] and meta["exit_code"] is None
        # the same process (its second publication) sees the change: didChange, not a restart
        clean = diag.annotate(_write(ctx, "a.txt", "fine\n"), ctx)
        assert "[diagnostics: no findings for a.txt (language server `" in clean.output
        again = diag.annotate(_write(ctx, "a.txt", "BAD\n"), ctx)
        assert again.output.endswith("a.txt:1:1: error: BAD is not allowed here [fake-lsp n3]")
        untouched = _write(ctx, "b.md", "BAD\n")
        assert diag.annotate(untouched, ctx) is untouched  # no server for .md
    finally:
        diag.close()
    assert (ctx.cwd / "lsp-exited").read_text() == "clean\n"  # shutdown, then exit


def test_a_missing_server_is_one_line_and_the_call_stands(ctx):
    diag = Diagnostics(DiagnosticsConfig(lsp={"txt": "no-such-language-server --stdio"}))
    result = diag.annotate(_write(ctx, "a.txt", "BAD\n"), ctx)
    assert not result.is_error and result.output.startswith("created a.txt")
    assert result.output.endswith(
        "[diagnostics: language server `no-such-language-server --stdio` not started: "
        "'no-such-language-server' is not installed (not found on PATH)]"
    )


def test_a_crashed_server_is_named_and_started_again(ctx):
    diag = _diag(ctx)
    try:
        crashed = diag.annotate(_write(ctx, "a.txt", "CRASH\n"), ctx)
        assert not crashed.is_error
        note = crashed.output.split("\n\n", 1)[1]
        assert "failed: it exited with code 3 (fake-lsp: boom)" in note, note
        assert note.endswith("it is started again on the next edit]")
        back = diag.annotate(_write(ctx, "a.txt", "BAD\n"), ctx)
        assert back.output.endswith("[fake-lsp n1]")  # a fresh process
    finally:
        diag.close()


def test_a_slow_server_times_out_and_stays(ctx):
    diag = _diag(ctx, lsp_timeout_s=0.5)
    try:
        slow = diag.annotate(_write(ctx, "a.txt", "SLOW\n"), ctx)
        assert slow.output.endswith(
            "[diagnostics: language server `"
            f"{sys.executable} -I {ctx.cwd / 'server.py'}` published nothing for a.txt "
            "within 0.5s]"
        )
        later = diag.annotate(_write(ctx, "a.txt", "BAD\n"), ctx)
        assert later.output.endswith("[fake-lsp n1]")  # the same server, still serving
    finally:
        diag.close()


def test_a_flood_of_diagnostics_is_capped(ctx):
    diag = _diag(ctx, max_chars=300)
    try:
        huge = diag.annotate(_write(ctx, "a.txt", "HUGE\n"), ctx)
        found = huge.output.split("\n\n", 1)[1]
        assert len(found) < 400 and "more characters of diagnostics cut]" in found
    finally:
        diag.close()


@pytest.mark.parametrize("confined", [True, False], ids=["sandboxed", "control-unconfined"])
def test_the_server_runs_in_the_sandbox(ctx, tmp_path, confined):
    outside = tmp_path.parent / f"{tmp_path.name}-lsp-outside.txt"
    if not confined:  # every layer off: the same server does write there
        policy = SandboxPolicy(
            workspace=ctx.cwd,
            mode=SandboxMode.FULL_ACCESS,
            dangerously_no_sandbox=True,
            disabled_layers=frozenset(LAYERS),
        )
        ctx = ToolContext(cwd=ctx.cwd, sandbox=Sandbox(policy))
    diag = _diag(ctx, f" --touch {outside}")
    try:
        result = diag.annotate(_write(ctx, "a.txt", "BAD\n"), ctx)
        assert "[fake-lsp n1]" in result.output  # it ran, and answered
    finally:
        diag.close()
    assert outside.exists() is not confined


def test_framing_refuses_what_would_fill_memory():
    ok = io.BytesIO(encode({"jsonrpc": "2.0", "method": "x"}))
    assert read_message(ok) == {"jsonrpc": "2.0", "method": "x"}
    assert read_message(ok) is None  # the end of the stream
    big = io.BytesIO(b"Content-Length: %d\r\n\r\n" % (MAX_MESSAGE_BYTES + 1))
    with pytest.raises(ProtocolError, match="message"):
        read_message(big)
    with pytest.raises(ProtocolError, match="header too long"):
        read_message(io.BytesIO(b"X" * 10_000 + b"\r\n"))
    with pytest.raises(ProtocolError, match="not JSON"):
        read_message(io.BytesIO(b"Content-Length: 3\r\n\r\nabc"))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"lsp": {"py": ""}}, "[diagnostics.lsp] maps an extension to a server"),
        ({"lsp": {"py": "pylsp"}, "lsp_timeout_s": 0}, "lsp_timeout_s must be positive"),
        ({}, "needs a command, [diagnostics.extensions] or [diagnostics.lsp]"),
    ],
)
def test_bad_lsp_tables_say_what_is_wrong(table, message):
    with pytest.raises(ValueError) as e:
        DiagnosticsConfig.from_table(table)
    assert message in str(e.value)


def test_a_server_that_keeps_failing_is_left_alone(ctx):
    diag = _diag(ctx)
    try:
        notes = [
            diag.annotate(_write(ctx, "a.txt", "CRASH\n"), ctx).output.split("\n\n", 1)[1]
            for _ in range(MAX_STARTS)
        ]
        assert all(n.endswith("it is started again on the next edit]") for n in notes[:-1])
        assert notes[-1].endswith("; not started again this session]")
        after = diag.annotate(_write(ctx, "a.txt", "BAD\n"), ctx)  # not even tried
        assert after.output.split("\n\n", 1)[1] == notes[-1]
    finally:
        diag.close()


def test_a_server_installed_in_the_project_is_found_after_the_path_is_confined(ctx, monkeypatch):
    """The agent process's own PATH loses the workspace's entries (host_programs): a server
    installed in the project (node_modules/.bin, an activated .venv/bin) still runs, in the
    sandbox, found on the PATH the sandbox gives it."""
    from m3agent.tools import host_programs

    bin_dir = ctx.cwd / "node_modules" / ".bin"
    bin_dir.mkdir(parents=True)
    exe = bin_dir / "fake-lsp"
    exe.write_text(f'#!/bin/sh\nexec {sys.executable} -I {ctx.cwd / "server.py"} "$@"\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setattr(host_programs, "_confined", None)
    host_programs.confine_process_path([ctx.cwd])
    assert shutil.which("fake-lsp") is None  # not on the process's own PATH any more
    diag = Diagnostics(DiagnosticsConfig(lsp={"txt": "fake-lsp"}))
    try:
        out = diag.annotate(_write(ctx, "a.txt", "BAD\n"), ctx).output
    finally:
        diag.close()
    assert out.endswith("a.txt:1:1: error: BAD is not allowed here [fake-lsp n1]"), out
