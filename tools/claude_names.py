"""Claude Code's tool names for ours, as each tool declares them (`Tool.claude_names`), so a
hook matcher, an agent's `tools:` list or a command's `allowed-tools` written for Claude Code
names the same tools here: `Bash` is `shell`, `Read` is `read_file`, `Edit` covers every tool
that changes a file (as its permission rules do), `TodoWrite` is `update_plan`, `Task` is
`task`. MCP tools keep their names (`mcp__server__tool` in both)."""

from __future__ import annotations

import functools
from collections.abc import Iterable

# The subagents' task tool lives in agent/ (tools may not import it): its declared name here.
_AGENT_TOOLS = {"task": ("Task",)}  # = agent/subagents/task_tool.TaskTool.claude_names
# Claude Code's key for a path argument, where ours is `path`.
CLAUDE_PATH_KEY = "file_path"


@functools.cache
def _tables() -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]]]:
    from .toolset import default_toolset
    from .update_plan import UpdatePlan
    from .web_fetch import WebFetch

    # web_fetch joins a session only when the config allows a domain: its name, always
    tools = [*default_toolset().tools(), UpdatePlan(), WebFetch()]
    ours_to_claude = {t.name: tuple(t.claude_names) for t in tools}
    ours_to_claude.update(_AGENT_TOOLS)
    claude_to_ours: dict[str, tuple[str, ...]] = {}
    for ours, names in ours_to_claude.items():
        for cc in names:
            claude_to_ours[cc] = (*claude_to_ours.get(cc, ()), ours)
    return ours_to_claude, claude_to_ours


def claude_names_of(tool: str) -> tuple[str, ...]:
    """Claude Code's names for one of our tools; () for MCP and unknown tools."""
    return _tables()[0].get(tool, ())


def tools_named(name: str) -> tuple[str, ...]:
    """Our tools a name stands for: a Claude Code name gives its tools, any other name itself."""
    return _tables()[1].get(name, (name,))


def resolve_tool_names(names: Iterable[str]) -> tuple[str, ...]:
    """A list of tool names in either vocabulary as ours, in order, each once."""
    out: list[str] = []
    for name in names:
        out.extend(t for t in tools_named(name) if t not in out)
    return tuple(out)


def with_claude_keys(arguments: dict[str, object]) -> dict[str, object]:
    """A tool's input as a Claude Code hook script reads it: `file_path` beside our `path`."""
    if "path" in arguments and CLAUDE_PATH_KEY not in arguments:
        return {**arguments, CLAUDE_PATH_KEY: arguments["path"]}
    return arguments


def from_claude_keys(updated: dict[str, object], arguments: dict[str, object]) -> dict[str, object]:
    """A hook's `updatedInput` in our keys: its `file_path` becomes `path` for a tool that has
    one (a tool whose own argument is `file_path`, e.g. an MCP tool, keeps it). A hook that
    echoes the whole input and changes only one of the two keys gets that change."""
    if CLAUDE_PATH_KEY in updated and "path" in arguments and CLAUDE_PATH_KEY not in arguments:
        updated = dict(updated)
        claude_path = updated.pop(CLAUDE_PATH_KEY)
        if updated.get("path", arguments["path"]) == arguments["path"]:
            updated["path"] = claude_path
    return updated
