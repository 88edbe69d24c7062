"""Toolset: the registry, the schema export (stable order), a dispatch that never raises, and
each call's declared contract (touches, preview) read before it runs.

`ToolsetProtocol` is what the agent relies on; `Toolset` (and tools/mcp's McpToolset) is it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from .background import BackgroundJobs
from .base import Blocker, Preview, PreviewKind, Tool, ToolContext, ToolResult, Touches
from .bounds import cut_result, preview_text
from .paths import PathDenied, shown_name


@runtime_checkable
class ToolsetProtocol(Protocol):
    """What a session needs of its tools."""

    def schemas(self) -> list[dict[str, Any]]: ...

    def get(self, name: str) -> Tool[Any]: ...

    def touches(self, name: str, arguments: object) -> Touches | None: ...

    def preview(self, name: str, arguments: object, ctx: ToolContext) -> Preview | None: ...

    def dispatch(self, name: str, arguments: object, ctx: ToolContext) -> ToolResult: ...

    def tools(self) -> list[Tool[Any]]:
        """Every tool instance, in the prompt's order (an MCP reload rebuilds from these)."""
        ...

    def close(self) -> None: ...


def validation_message(name: str, err: ValidationError) -> str:
    rows = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"]) or "(arguments)"
        if e["type"] == "missing":
            rows.append(f"missing required argument '{loc}'")
        elif e["type"] == "extra_forbidden":
            rows.append(f"unknown argument '{loc}'")
        else:
            rows.append(
                f"argument '{loc}': {e['msg']} (got {json.dumps(e.get('input'), default=str)[:80]})"
            )
    return f"invalid arguments for {name}: " + "; ".join(rows)


class Toolset:
    def __init__(self, tools: Iterable[Tool[Any]]) -> None:
        self._tools: dict[str, Tool[Any]] = {}
        for t in tools:
            if t.name in self._tools:
                raise ValueError(f"two tools are named {t.name!r}")
            self._tools[t.name] = t

    def names(self) -> list[str]:
        return list(self._tools)

    def tools(self) -> list[Tool[Any]]:
        """The tool instances, in registration order (to build a larger set from this one)."""
        return list(self._tools.values())

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI tool objects, in registration order (stable, so prompts stay cacheable)."""
        return [t.schema() for t in self._tools.values()]

    def get(self, name: str) -> Tool[Any]:
        """The tool named `name` (KeyError if none): its attributes say what it is."""
        try:
            return self._tools[name]
        except KeyError:
            raise KeyError(f"unknown tool {name!r}") from None

    def __contains__(self, name: str) -> bool:
        return name in self._tools

    def close(self) -> None:
        """Releases what the tools hold: the shell's background commands are killed (MCP
        servers: tools/mcp). The session calls it when it closes."""
        for tool in self._tools.values():
            jobs = getattr(tool, "jobs", None)
            if isinstance(jobs, BackgroundJobs):
                jobs.close()

    def touches(self, name: str, arguments: object) -> Touches | None:
        """The paths a call names; None for an unknown tool or invalid arguments (the call
        itself reports those)."""
        parsed = self._parse(name, arguments)
        if isinstance(parsed, ToolResult):
            return None
        return self._tools[name].touches(parsed)

    def preview(self, name: str, arguments: object, ctx: ToolContext) -> Preview | None:
        """What a call would do, computed without doing it; never raises. A call that would
        fail previews as an error saying why (the same words its result would carry)."""
        parsed = self._parse(name, arguments)
        if isinstance(parsed, ToolResult):
            return Preview(
                PreviewKind.TEXT, preview_text(parsed.output, "message")[0], is_error=True
            )
        try:
            return self._tools[name].preview(parsed, ctx)
        except PathDenied as e:
            return Preview(PreviewKind.TEXT, str(e), is_error=True)
        except Exception as e:  # a preview bug must not stop the approval being asked
            return Preview(PreviewKind.TEXT, f"no preview: {type(e).__name__}: {e}", is_error=True)

    def dispatch(self, name: str, arguments: object, ctx: ToolContext) -> ToolResult:
        parsed = self._parse(name, arguments)
        if isinstance(parsed, ToolResult):
            return parsed
        try:
            return _bounded(self._tools[name].run(parsed, ctx))
        except PathDenied as e:  # the one path guard every tool goes through
            return ToolResult(str(e), is_error=True, metadata={"blocked_by": Blocker.PATH_GUARD})
        except Exception as e:  # a tool bug must reach the model as a result, not kill the turn
            return ToolResult(f"{name} failed: {type(e).__name__}: {e}", is_error=True)

    def _parse(self, name: str, arguments: object) -> BaseModel | ToolResult:
        """The tool's typed arguments, or the error result saying what is wrong with them."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(self._tools)
            return ToolResult(f"unknown tool {name!r}; available tools: {known}", is_error=True)
        if isinstance(arguments, str):  # some servers hand over the JSON text
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as e:
                return ToolResult(f"arguments for {name} are not valid JSON: {e}", is_error=True)
        if not isinstance(arguments, dict):
            return ToolResult(
                f"arguments for {name} must be an object, got {type(arguments).__name__}",
                is_error=True,
            )
        try:
            return tool.Args.model_validate(arguments)
        except ValidationError as e:
            return ToolResult(validation_message(name, e), is_error=True)


def _bounded(result: ToolResult) -> ToolResult:
    """The last net: no tool result, whatever the tool, exceeds bounds.RESULT_CHARS, or holds
    a lone surrogate (a non-UTF-8 byte from a file name), which no log or engine can encode."""
    output = shown_name(result.output)
    meta = _escaped(result.metadata)
    if output is not result.output or meta is not result.metadata:
        # an escaped byte takes four characters: an image after it moves with its text
        media = tuple((k, p, len(shown_name(result.output[:off]))) for k, p, off in result.media)
        result = replace(result, output=output, metadata=meta, media=media)
    return cut_result(result)


def _escaped(value: Any) -> Any:
    """`value` with every string passed through shown_name; the same object when unchanged."""
    if isinstance(value, str):
        return shown_name(value)
    if isinstance(value, dict):
        fields = {k: _escaped(v) for k, v in value.items()}
        return value if all(fields[k] is value[k] for k in value) else fields
    if isinstance(value, (list, tuple)):
        items = [_escaped(v) for v in value]
        return (
            value if all(a is b for a, b in zip(items, value, strict=True)) else type(value)(items)
        )
    return value


def background_jobs(toolset: ToolsetProtocol | None) -> BackgroundJobs | None:
    """The background commands of a session's toolset (its shell tool's); None without one."""
    try:
        jobs = getattr(toolset.get("shell"), "jobs", None) if toolset is not None else None
    except KeyError:
        return None
    return jobs if isinstance(jobs, BackgroundJobs) else None


def default_toolset(include: Iterable[str] | None = None, use_ripgrep: bool = True) -> Toolset:
    """The standard tools in a fixed order; `include` keeps a subset (same order)."""
    from .apply_patch import ApplyPatch
    from .edit_file import EditFile
    from .glob import Glob
    from .grep import Grep
    from .list_dir import ListDir
    from .read_file import ReadFile
    from .shell import Shell
    from .shell_jobs import ShellKill, ShellOutput
    from .write_file import WriteFile

    jobs = BackgroundJobs()  # shared by the three shell tools: one session's commands
    tools: list[Tool[Any]] = [
        ReadFile(),
        ListDir(),
        Glob(),
        Grep(use_ripgrep=use_ripgrep),
        WriteFile(),
        EditFile(),
        ApplyPatch(),
        Shell(jobs),
        ShellOutput(jobs),
        ShellKill(jobs),
    ]
    if include is not None:
        wanted = set(include)
        unknown = wanted - {t.name for t in tools}
        if unknown:
            raise ValueError(f"unknown tool name(s): {', '.join(sorted(unknown))}")
        tools = [t for t in tools if t.name in wanted]
    return Toolset(tools)
