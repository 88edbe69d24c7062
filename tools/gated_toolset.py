"""Another toolset's tools with some of them refused: the same list in the prompt (the tools
that open it never change, so the prefix cache holds), but a refused tool does not run.

A refused call is refused twice over: `get` raises KeyError, so the session asks no approval
for a call that will not run, and `dispatch` answers with a denied ToolResult the model sees.
Subclasses say which calls (`refused`) and in which words (`unavailable`, `denial`): a
subagent's restricted tools (agent/subagents), an editor's plan mode (app/acp).
"""

from __future__ import annotations

from typing import Any

from .base import Preview, Tool, ToolContext, ToolOutcome, ToolResult, Touches
from .toolset import ToolsetProtocol


class GatedToolset:
    def __init__(self, inner: ToolsetProtocol) -> None:
        self.inner = inner

    def refused(self, name: str) -> bool:
        raise NotImplementedError

    def unavailable(self, name: str) -> str:
        """get's KeyError message."""
        raise NotImplementedError

    def denial(self, name: str) -> str:
        """dispatch's answer to the model."""
        raise NotImplementedError

    def schemas(self) -> list[dict[str, Any]]:
        return self.inner.schemas()  # the same bytes as the inner tools': a prefix-cache hit

    def get(self, name: str) -> Tool[Any]:
        if self.refused(name):  # no approval is asked for a call that will be refused
            raise KeyError(self.unavailable(name))
        return self.inner.get(name)

    def touches(self, name: str, arguments: object) -> Touches | None:
        return self.inner.touches(name, arguments)

    def preview(self, name: str, arguments: object, ctx: ToolContext) -> Preview | None:
        return self.inner.preview(name, arguments, ctx)

    def dispatch(self, name: str, arguments: object, ctx: ToolContext) -> ToolResult:
        if self.refused(name):
            return ToolResult(self.denial(name), is_error=True, metadata={ToolOutcome.DENIED: True})
        return self.inner.dispatch(name, arguments, ctx)

    def tools(self) -> list[Tool[Any]]:
        return self.inner.tools()  # the same list: a refused tool is refused when called

    def close(self) -> None:
        self.inner.close()
