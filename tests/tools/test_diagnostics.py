"""Diagnostics after edits (tools/diagnostics.py): a real checker (ruff, and shell scripts)
under the real sandbox, on the files a real edit tool changed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from m3agent.tools.base import ToolContext, ToolResult
from m3agent.tools.diagnostics import Diagnostics, DiagnosticsConfig
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
from m3agent.tools.toolset import default_toolset

RUFF = f"{Path(sys.executable).parent / 'ruff'} check --quiet --no-cache --output-format=concise {{files}}"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    sb = Sandbox(SandboxPolicy(workspace=tmp_path_factory.mktemp("diagws")))
    if not sb.report.protective:
        pytest.skip("no sandbox layer works here")
    return sb


@pytest.fixture
def ctx(sandbox, tmp_path):
    ws = sandbox.policy.workspace / tmp_path.name
    ws.mkdir()
    return ToolContext(cwd=ws, sandbox=sandbox)


def _write(ctx, path: str, content: str) -> ToolResult:
    return default_toolset().dispatch("write_file", {"path": path, "content": content}, ctx)


def test_findings_for_the_changed_file_join_its_result(ctx):
    diag = Diagnostics(DiagnosticsConfig(command=RUFF))
    result = diag.annotate(_write(ctx, "pkg/a.py", "import os\n"), ctx)
    assert not result.is_error  # the write itself worked; the findings are for the model
    head, found = result.output.split("\n\n", 1)
    assert head.startswith("wrote ") or "pkg/a.py" in head
    assert found.startswith("[diagnostics for pkg/a.py (`")
    assert "pkg/a.py:1:8: F401" in found and "`os` imported but unused" in found
    (meta,) = result.metadata["diagnostics"]
    assert meta["exit_code"] == 1 and meta["findings"]
    clean = diag.annotate(_write(ctx, "pkg/a.py", "import os\n\nprint(os.sep)\n"), ctx)
    assert "[diagnostics: no findings for pkg/a.py (`" in clean.output
    assert clean.output.endswith(", exit 0)]")


def test_by_extension_and_files_nobody_checks(ctx):
    cfg = DiagnosticsConfig(extensions={".sh": "bash -n {files}"})
    diag = Diagnostics(cfg)
    bad = diag.annotate(_write(ctx, "run.sh", "if then fi\n"), ctx)
    assert "[diagnostics for run.sh (`bash -n run.sh`, exit 2):]" in bad.output
    assert "syntax error" in bad.output
    plain = _write(ctx, "notes.txt", "hello\n")
    assert diag.annotate(plain, ctx) is plain  # no checker for .txt: unchanged


def test_a_whole_project_checker_keeps_the_lines_about_changed_files(ctx):
    # stands for tsc or cargo: it reports on the whole project, whatever changed
    (ctx.cwd / "check.sh").write_text(
        "echo 'old.py:1: stale'\necho 'renew.py:2: other'\necho 'new.py:3: undefined name y'\n"
    )
    result = Diagnostics(DiagnosticsConfig(command="sh check.sh")).annotate(
        _write(ctx, "new.py", "print(y)\n"), ctx
    )
    assert result.output.endswith("(`sh check.sh`, exit 0):]\nnew.py:3: undefined name y")


def test_failed_calls_deleted_files_and_bounds(ctx):
    diag = Diagnostics(DiagnosticsConfig(command="seq 1 5000; echo {files}", max_chars=200))
    failed = ToolResult("no", is_error=True, metadata={"paths_changed": [str(ctx.cwd / "a.py")]})
    assert diag.annotate(failed, ctx) is failed
    gone = ToolResult("deleted", metadata={"paths_changed": [str(ctx.cwd / "gone.py")]})
    assert diag.annotate(gone, ctx) is gone
    long = diag.annotate(_write(ctx, "b.py", "x = 1\n"), ctx)
    findings = long.output.split("\n\n", 1)[1]
    assert len(findings) < 300 and "more characters of diagnostics cut]" in findings


def test_a_checker_that_hangs_is_stopped(ctx):
    diag = Diagnostics(DiagnosticsConfig(command="sleep 30", timeout_s=0.5))
    result = diag.annotate(_write(ctx, "c.py", "x = 1\n"), ctx)
    assert "[diagnostics: `sleep 30` timed out after 0.5s]" in result.output


def test_the_checker_runs_in_the_sandbox(ctx, tmp_path):
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    diag = Diagnostics(DiagnosticsConfig(command=f"echo x > {outside}; echo {{files}}"))
    diag.annotate(_write(ctx, "d.py", "x = 1\n"), ctx)
    assert not outside.exists()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({}, "needs a command, [diagnostics.extensions] or [diagnostics.lsp]"),
        ({"command": "x", "colour": 1}, "unknown setting(s) colour"),
        ({"command": "x", "timeout_s": 0}, "timeout_s must be positive"),
        ({"command": "x", "max_chars": 10**6}, "max_chars must be 1 to 50000"),
        ({"extensions": {"py": 3}}, "maps an extension to a command"),
    ],
)
def test_bad_tables_say_what_is_wrong(table, message):
    with pytest.raises(ValueError) as e:
        DiagnosticsConfig.from_table(table)
    assert message in str(e.value)
