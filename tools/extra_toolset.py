"""A toolset with more tools after another's: the session's base (and MCP) tools first, then
the extension tools (skill, update_plan, task). The order is fixed when the session starts,
so the tool list that opens the prompt never changes mid-session."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .base import Preview, Tool, ToolContext, ToolResult, Touches
from .toolset import Toolset, ToolsetProtocol


class ExtendedToolset:
    def __init__(self, inner: ToolsetProtocol, extra: Iterable[Tool[Any]]) -> None:
        self.inner = inner
        self.extra = Toolset(extra)
        clash = {s["function"]["name"] for s in inner.schemas()} & set(self.extra.names())
        if clash:
            raise ValueError(f"tool name(s) used twice: {', '.join(sorted(clash))}")

    def _owner(self, name: str) -> ToolsetProtocol:
        return self.extra if name in self.extra else self.inner

    def schemas(self) -> list[dict[str, Any]]:
        return [*self.inner.schemas(), *self.extra.schemas()]

    def get(self, name: str) -> Tool[Any]:
        return self._owner(name).get(name)

    def touches(self, name: str, arguments: object) -> Touches | None:
        return self._owner(name).touches(name, arguments)

    def preview(self, name: str, arguments: object, ctx: ToolContext) -> Preview | None:
        return self._owner(name).preview(name, arguments, ctx)

    def dispatch(self, name: str, arguments: object, ctx: ToolContext) -> ToolResult:
        return self._owner(name).dispatch(name, arguments, ctx)

    def names(self) -> list[str]:
        return [s["function"]["name"] for s in self.schemas()]

    def tools(self) -> list[Tool[Any]]:
        """Every tool instance, the extension tools last (an MCP reload rebuilds from these)."""
        return [*self.inner.tools(), *self.extra.tools()]

    def close(self) -> None:
        self.inner.close()
        self.extra.close()
