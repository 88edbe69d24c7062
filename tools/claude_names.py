"""Claude Code's tool names for ours, as each tool declares them (`Tool.claude_names`), so a
hook matcher, an agent's `tools:` list or a command's `allowed-tools` written for Claude Code
names the same tools here: `Bash` is `shell`, `Read` is `read_file`, `Edit` covers every tool
that changes a file (as its permission rules do), `TodoWrite` is `update_plan`, `Task` is
`task`. MCP tools keep their names (`mcp__server__tool` in both).

Beside the names, the table of what each built-in tool does (`Tool.capability`): a rule about
one file tool covers every tool of its capability (`Read(secrets/**)` covers grep, glob and
list_dir too; agent/approval_rules.py: covered_tools)."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable
from typing import Any

from .base import Capability, Tool

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


@functools.cache
def _capabilities() -> dict[str, Capability]:
    from .toolset import default_toolset

    return {t.name: t.capability for t in default_toolset().tools()}


def tools_of(capability: Capability) -> tuple[str, ...]:
    """The built-in tools of one capability, in the toolset's order."""
    return tuple(n for n, c in _capabilities().items() if c is capability)


def with_same_capability(names: Iterable[str]) -> tuple[str, ...]:
    """`names` and every built-in file tool that does what one of them does (reads or
    changes files), in order, each once: the tools a rule covers (agent/approvals.py)."""
    out: list[str] = []
    for name in names:
        cap = _capabilities().get(name)
        same = tools_of(cap) if cap in (Capability.READ, Capability.WRITE) else ()
        out.extend(t for t in (name, *same) if t not in out)
    return tuple(out)


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


def canonical_arguments(tool: Tool[Any], arguments: object) -> dict[str, Any]:
    """The one set of arguments `tool` runs with, which hooks see and rules judge: Claude
    Code's `file_path` read as our `path` (for a tool that takes `path` and not `file_path`),
    a `file_path` beside a different `path` refused as ambiguous, keys the tool does not take
    dropped, each value as the tool reads it (defaults are left to the tool). ValueError says
    what is wrong with them (the words the tool's own result would carry)."""
    from pydantic import ValidationError

    from .toolset import validation_message

    if isinstance(arguments, str):  # some servers hand over the JSON text
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as e:
            raise ValueError(f"arguments for {tool.name} are not valid JSON: {e}") from None
    if not isinstance(arguments, dict):
        raise ValueError(
            f"arguments for {tool.name} must be an object, got {type(arguments).__name__}"
        )
    fields = tool.Args.model_fields
    if CLAUDE_PATH_KEY in arguments and "path" in fields and CLAUDE_PATH_KEY not in fields:
        arguments = dict(arguments)
        claude_path = arguments.pop(CLAUDE_PATH_KEY)
        if "path" in arguments and arguments["path"] != claude_path:
            raise ValueError(
                f"ambiguous arguments for {tool.name}: `path` ({arguments['path']!r}) and "
                f"`{CLAUDE_PATH_KEY}` ({claude_path!r}) differ; give one"
            )
        arguments["path"] = claude_path
    try:
        parsed = tool.Args.model_validate(arguments)
    except ValidationError as e:
        raise ValueError(validation_message(tool.name, e)) from None
    return parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)


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
