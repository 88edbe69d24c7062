"""The Tool contract (ARCHITECTURE, Redesign 1): `mutates`, `touches(args)`, `preview(args, ctx)`.

Real tools on real files in tmp dirs: a preview is the diff the call then makes, byte for byte;
a preview never writes; a call that would fail previews as an error saying why; the sandbox
precheck is derived from what each tool declares, with no table of tool names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

import mcp.types as mcp_types
import pytest
from m3agent.tools.base import Preview, PreviewKind, Tool, ToolContext, ToolResult, Touches
from m3agent.tools.bounds import META_DIFF_BYTES, META_DIFF_LINES
from m3agent.tools.mcp.adapter import McpTool
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.precheck import blocks
from m3agent.tools.toolset import Toolset, ToolsetProtocol, default_toolset
from pydantic import BaseModel
from sandbox_support import unprobed


def _state(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file and directory under root: (content, mtime_ns, mode); a preview changes none."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (
                p.read_bytes() if p.is_file() else b"",
                st.st_mtime_ns,
                st.st_mode,
            )
    return out


@pytest.fixture
def ws(tmp_path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "calc.py").write_text(
        "def add(a, b):\n    return a - b\n\n\ndef one():\n    return 1\n"
    )
    (root / "README.md").write_text("# calc\n")
    (root / "old.txt").write_text("gone soon\n")
    return root


@pytest.fixture
def tools() -> Toolset:
    return default_toolset(use_ripgrep=False)


def _preview_then_run(
    tools: Toolset, ws: Path, name: str, args: dict
) -> tuple[Preview, ToolResult]:
    ctx = ToolContext(cwd=ws)
    before = _state(ws)
    preview = tools.preview(name, args, ctx)
    assert _state(ws) == before, "the preview changed the workspace"
    result = tools.dispatch(name, args, ctx)
    assert not result.is_error, result.output
    assert _state(ws) != before
    return preview, result


def test_edit_preview_is_the_diff_the_edit_makes(tools, ws):
    args = {"path": "src/calc.py", "old_string": "a - b", "new_string": "a + b"}
    preview, result = _preview_then_run(tools, ws, "edit_file", args)
    assert preview.kind is PreviewKind.DIFF and not preview.is_error and preview.note == ""
    assert preview.text == result.metadata["diff"]
    assert preview.text.startswith("--- a/src/calc.py\n+++ b/src/calc.py\n")
    assert "-    return a - b\n+    return a + b\n" in preview.text


def test_edit_replace_all_preview(tools, ws):
    (ws / "r.txt").write_text("x\ny\nx\n")
    args = {"path": "r.txt", "old_string": "x", "new_string": "z", "replace_all": True}
    preview, result = _preview_then_run(tools, ws, "edit_file", args)
    assert preview.text == result.metadata["diff"] and preview.text.count("+z\n") == 2


def test_write_preview_new_file(tools, ws):
    args = {"path": "pkg/deep/new.py", "content": "print('hi')\n"}
    preview, result = _preview_then_run(tools, ws, "write_file", args)
    assert preview.kind is PreviewKind.DIFF
    assert preview.text == result.metadata["diff"]
    assert "+print('hi')\n" in preview.text


def test_write_preview_overwrite(tools, ws):
    args = {"path": "README.md", "content": "# calc\n\nAdds numbers.\n"}
    preview, result = _preview_then_run(tools, ws, "write_file", args)
    assert preview.text == result.metadata["diff"]
    assert preview.text.startswith("--- a/README.md\n+++ b/README.md\n")
    assert "+Adds numbers.\n" in preview.text


def test_apply_patch_preview_is_the_diff_it_applies(tools, ws):
    patch = "\n".join(
        [
            "*** Begin Patch",
            "*** Update File: src/calc.py",
            "*** Move to: src/arith.py",
            "@@ def add(a, b):",
            "-    return a - b",
            "+    return a + b",
            "*** Add File: docs/notes.md",
            "+# notes",
            "*** Delete File: old.txt",
            "*** End Patch",
        ]
    )
    preview, result = _preview_then_run(tools, ws, "apply_patch", {"patch": patch})
    assert preview.kind is PreviewKind.DIFF
    assert preview.text == result.metadata["diff"]
    assert "--- a/src/calc.py\n+++ b/src/arith.py\n" in preview.text
    assert "--- /dev/null\n+++ b/docs/notes.md\n" in preview.text
    assert "--- a/old.txt\n+++ /dev/null\n" in preview.text


def test_apply_patch_unified_diff_preview(tools, ws):
    patch = "--- a/README.md\n+++ b/README.md\n@@ -1 +1,2 @@\n # calc\n+more\n"
    preview, result = _preview_then_run(tools, ws, "apply_patch", {"patch": patch})
    assert preview.text == result.metadata["diff"] and "+more\n" in preview.text


@pytest.mark.parametrize(
    ("name", "args", "why"),
    [
        (
            "edit_file",
            {"path": "src/calc.py", "old_string": "a * b", "new_string": "q"},
            "old_string not found",
        ),
        (
            "edit_file",
            {"path": "src/calc.py", "old_string": "return", "new_string": "yield"},
            "occurs 2 times",
        ),
        ("edit_file", {"path": "nope.py", "old_string": "a", "new_string": "b"}, "no such file"),
        (
            "edit_file",
            {"path": "../outside.py", "old_string": "a", "new_string": "b"},
            "outside the writable roots",
        ),
        ("edit_file", {"path": "src/calc.py"}, "missing required argument 'old_string'"),
        ("write_file", {"path": "src", "content": "x"}, "is a directory"),
        ("write_file", {"path": ".git/hooks/pre-commit", "content": "x"}, "protected"),
        (
            "apply_patch",
            {
                "patch": "*** Begin Patch\n*** Update File: src/calc.py\n@@\n-nothing like"
                " this\n+x\n*** End Patch"
            },
            "does not apply",
        ),
        ("apply_patch", {"patch": "not a patch"}, "not a patch"),
        ("shell", {"command": "ls", "workdir": "no/such/dir"}, "no such directory"),
        ("no_such_tool", {}, "unknown tool"),
    ],
)
def test_a_failing_call_previews_why(tools, ws, name, args, why):
    ctx = ToolContext(cwd=ws)
    before = _state(ws)
    preview = tools.preview(name, args, ctx)
    assert _state(ws) == before
    assert preview is not None and preview.is_error and preview.kind is PreviewKind.TEXT
    assert why in preview.text
    if name != "no_such_tool":  # the call itself fails the same way
        result = tools.dispatch(name, args, ctx)
        assert result.is_error and why in result.output


def test_preview_of_a_fifo_does_not_hang(tools, ws):
    os.mkfifo(ws / "pipe")
    preview = tools.preview("write_file", {"path": "pipe", "content": "x"}, ToolContext(cwd=ws))
    assert preview.is_error and "not a regular file" in preview.text
    preview = tools.preview(
        "edit_file", {"path": "pipe", "old_string": "a", "new_string": "b"}, ToolContext(cwd=ws)
    )
    assert preview.is_error


def test_preview_through_a_symlink_out_of_the_workspace_is_refused(tools, ws, tmp_path):
    (tmp_path / "secret.txt").write_text("keep\n")
    (ws / "link.txt").symlink_to(tmp_path / "secret.txt")
    preview = tools.preview("write_file", {"path": "link.txt", "content": "x"}, ToolContext(cwd=ws))
    assert preview.is_error and "outside the writable roots" in preview.text
    assert (tmp_path / "secret.txt").read_text() == "keep\n"


def test_a_huge_edit_preview_is_bounded_and_says_so(tools, ws):
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(12_000)))
    args = {"path": "big.txt", "old_string": "line", "new_string": "LINE", "replace_all": True}
    preview, result = _preview_then_run(tools, ws, "edit_file", args)
    assert len(preview.text.splitlines()) <= META_DIFF_LINES
    assert len(preview.text.encode()) <= META_DIFF_BYTES
    assert "diff cut: showing" in preview.note and "nothing is changed until the call runs" in (
        preview.note
    )
    assert result.metadata["diff"].startswith(preview.text)  # the same head as the result's


def test_shell_preview_is_the_command_and_its_directory_and_runs_nothing(tools, ws):
    (ws / "sub").mkdir()
    ctx = ToolContext(cwd=ws, timeout_s=30)
    preview = tools.preview("shell", {"command": "touch marker && echo hi", "workdir": "sub"}, ctx)
    assert preview.kind is PreviewKind.COMMAND and not preview.is_error
    assert (
        preview.text == f"cwd: {(ws / 'sub').resolve()} (timeout 30s)\n$ touch marker && echo hi\n"
    )
    assert not (ws / "sub" / "marker").exists()
    long = tools.preview("shell", {"command": "echo x\n" * 20_000}, ctx)
    assert long.text.startswith(f"cwd: {ws.resolve()}") and "command cut: showing" in long.note


def test_mcp_tool_preview_names_server_tool_and_arguments(ws):
    remote = mcp_types.Tool(
        name="search",
        description="find things",
        inputSchema={"type": "object", "properties": {"q": {"type": "string"}}},
    )
    tool = McpTool(None, "docs", remote)  # no server: a preview never calls it
    tools = Toolset([tool])
    preview = tools.preview(tool.name, {"q": "sandbox"}, ToolContext(cwd=ws))
    assert preview.kind is PreviewKind.TEXT and not preview.is_error
    assert preview.text.startswith("MCP server docs, tool search\n")
    assert '"q": "sandbox"' in preview.text
    assert tools.touches(tool.name, {"q": "x"}) == Touches(opaque=True)
    assert tool.mutates and tool.risky


def test_touches_of_each_tool(tools):
    t = tools.touches
    assert t("read_file", {"path": "a.py"}) == Touches(reads=("a.py",))
    assert t("list_dir", {}) == Touches(reads=(".",))
    assert t("glob", {"pattern": "*.py", "path": "src"}) == Touches(reads=("src",))
    assert t("grep", {"pattern": "x"}) == Touches(reads=(".",))
    assert t("write_file", {"path": "b.py", "content": ""}) == Touches(writes=("b.py",))
    assert t("edit_file", {"path": "c.py", "old_string": "a", "new_string": "b"}) == Touches(
        reads=("c.py",), writes=("c.py",)
    )
    patch = (
        "*** Begin Patch\n*** Update File: a.py\n*** Move to: b.py\n@@\n-x\n+y\n"
        "*** Add File: n.py\n+z\n*** Delete File: d.py\n*** End Patch"
    )
    assert t("apply_patch", {"patch": patch}) == Touches(
        reads=("a.py", "d.py"), writes=("a.py", "b.py", "n.py", "d.py")
    )
    assert t("apply_patch", {"patch": "garbage"}) == Touches()
    assert t("shell", {"command": "ls"}) == Touches(opaque=True)
    assert t("shell", {"command": "ls", "workdir": "src"}) == Touches(reads=("src",), opaque=True)
    assert t("shell_output", {"job_id": "b1"}) == Touches()  # only its own commands' output
    assert t("shell_kill", {"job_id": "b1"}) == Touches()
    assert t("edit_file", {"path": "c.py"}) is None  # invalid: the call itself reports it
    assert t("no_such_tool", {}) is None
    assert {n: tools.get(n).mutates for n in tools.names()} == {
        "read_file": False,
        "list_dir": False,
        "glob": False,
        "grep": False,
        "write_file": True,
        "edit_file": True,
        "apply_patch": True,
        "shell": True,
        "shell_output": False,
        "shell_kill": False,
    }


def test_the_toolsets_satisfy_the_protocol(tools):
    assert isinstance(tools, ToolsetProtocol)
    from m3agent.tools.mcp import McpToolset

    assert issubclass(McpToolset, Toolset)


class _DropArgs(BaseModel):
    to: str


class _Drop(Tool[_DropArgs]):
    """A tool no table anywhere has heard of: it declares what it writes, and that is enough."""

    name = "drop_file"
    description = "write a marker file"
    mutates = True

    def touches(self, args: _DropArgs) -> Touches:
        return Touches(writes=(args.to,))

    def run(self, args, ctx):  # pragma: no cover - never run here
        raise AssertionError


def test_precheck_judges_a_new_tool_by_its_declaration(ws):
    tools = Toolset([_Drop()])
    sb = unprobed(SandboxPolicy(workspace=ws))
    assert not blocks(sb, tools.touches("drop_file", {"to": "out/m.txt"}))
    assert blocks(sb, tools.touches("drop_file", {"to": "../m.txt"}))
    assert blocks(sb, tools.touches("drop_file", {"to": ".git/config"}))
    assert blocks(
        unprobed(SandboxPolicy(workspace=ws, mode="read-only")),
        tools.touches("drop_file", {"to": "out/m.txt"}),
    )
    assert blocks(sb, Touches(reads=("~/.ssh/id_rsa",)))
    assert not blocks(sb, Touches(opaque=True))  # left to the layers at run time


def test_no_table_of_tool_names_outside_the_tools():
    """Which tool touches what is said once, by each tool: not in the precheck, the agent or
    the app (the TUI's own diff code and the precheck's tables are gone)."""
    pkg = Path(__file__).resolve().parents[2]
    names = [cls.name for cls in map(type, default_toolset().tools())]
    offenders = []
    files = [
        pkg / "tools" / "sandbox" / "precheck.py",
        # command_rules.py holds command-line words (`git grep`, `hatch shell`), not tool names
        *(f for f in (pkg / "agent").rglob("*.py") if f.name != "command_rules.py"),
        *(pkg / "app").rglob("*.py"),
    ]
    for f in files:
        text = f.read_text(encoding="utf-8")
        for n in names:
            if f'"{n}"' in text or f"'{n}'" in text:
                offenders.append(f"{f.relative_to(pkg)}: {n}")
    assert offenders == []
    assert not (pkg / "app" / "tui" / "preview.py").exists()


def test_args_is_the_type_argument_unless_the_body_names_one():
    assert _Drop.Args is _DropArgs  # `Tool[_DropArgs]` says it once
    assert _Drop().parameters()["properties"] == {"to": {"type": "string"}}

    class Other(BaseModel):
        n: int

    class Named(Tool[_DropArgs]):
        Args = Other  # the class body wins

    class Sub(_Drop):  # a subclass keeps its base's
        pass

    ArgsT = TypeVar("ArgsT", bound=BaseModel)

    class Generic(Tool[ArgsT]):  # an intermediate generic base names no model yet
        pass

    class Concrete(Generic[Other]):
        pass

    assert Named.Args is Other and Sub.Args is _DropArgs
    assert "Args" not in Generic.__dict__ and "Args" not in Concrete.__dict__
    for tool in default_toolset().tools():  # every built-in tool has its model
        assert issubclass(tool.Args, BaseModel), tool.name
