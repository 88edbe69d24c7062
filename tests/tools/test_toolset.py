"""Toolset: stable schemas, dispatch that turns every bad call into an error result."""

from __future__ import annotations

import json

import pytest
from m3agent.tools.base import Tool, ToolContext, ToolResult
from m3agent.tools.toolset import Toolset, default_toolset

NAMES = [
    "read_file",
    "list_dir",
    "glob",
    "grep",
    "write_file",
    "edit_file",
    "apply_patch",
    "shell",
    "shell_output",
    "shell_kill",
]


def test_schemas_are_stable_openai_objects():
    a, b = default_toolset().schemas(), default_toolset().schemas()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert [s["function"]["name"] for s in a] == NAMES
    for s in a:
        assert s["type"] == "function"
        params = s["function"]["parameters"]
        assert params["type"] == "object" and "title" not in params


def test_mutates_flags():
    ts = default_toolset()
    assert {n for n in NAMES if ts.get(n).mutates} == {
        "write_file",
        "edit_file",
        "apply_patch",
        "shell",
    }
    with pytest.raises(KeyError):
        ts.get("nope")


@pytest.mark.parametrize(
    "name,args,expected",
    [
        ("no_such_tool", {}, "unknown tool 'no_such_tool'; available tools: read_file"),
        ("read_file", {}, "missing required argument 'path'"),
        ("read_file", {"path": 12}, "argument 'path': Input should be a valid string"),
        ("read_file", {"path": "x", "offset": "two"}, "argument 'offset'"),
        ("read_file", {"path": "x", "offset": 0}, "greater than or equal to 1"),
        ("read_file", "not json", "not valid JSON"),
        ("read_file", ["x"], "must be an object, got list"),
        ("shell", {"command": "true", "timeout_s": -1}, "argument 'timeout_s'"),
    ],
)
def test_bad_calls_become_error_results(tmp_path, name, args, expected):
    r = default_toolset().dispatch(name, args, ToolContext(cwd=tmp_path))
    assert r.is_error and expected in r.output, r.output


def test_json_string_arguments_accepted(tmp_path):
    (tmp_path / "a.txt").write_text("hello\n")
    r = default_toolset().dispatch(
        "read_file", json.dumps({"path": "a.txt"}), ToolContext(cwd=tmp_path)
    )
    assert not r.is_error and "hello" in r.output


def test_a_crashing_tool_becomes_an_error_result(tmp_path):
    from pydantic import BaseModel

    class Boom(Tool):
        name = "boom"
        description = "fails"

        class Args(BaseModel):
            pass

        def run(self, args, ctx) -> ToolResult:
            raise RuntimeError("disk on fire")

    r = Toolset([Boom()]).dispatch("boom", {}, ToolContext(cwd=tmp_path))
    assert r.is_error and r.output == "boom failed: RuntimeError: disk on fire"


def test_duplicate_names_and_unknown_subset_rejected():
    from m3agent.tools.read_file import ReadFile

    with pytest.raises(ValueError, match="two tools"):
        Toolset([ReadFile(), ReadFile()])
    with pytest.raises(ValueError, match="unknown tool name"):
        default_toolset(include=["read_file", "teleport"])
    assert default_toolset(include=["shell", "read_file"]).names() == ["read_file", "shell"]
