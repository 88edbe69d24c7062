"""A child's tools: the parent's full list in the prompt (so the child's prompt opens with the
parent's cached prefix, tools included), but only its agent's subset may run."""

from __future__ import annotations

from typing import Any

from m3agent.tools.base import Preview, Tool, ToolContext, ToolOutcome, ToolResult, Touches


class RestrictedToolset:
    def __init__(self, inner: Any, allowed: frozenset[str]) -> None:
        self.inner = inner
        self.allowed = allowed

    def schemas(self) -> list[dict[str, Any]]:
        return self.inner.schemas()  # the same bytes as the parent's: a prefix-cache hit

    def get(self, name: str) -> Tool:
        if name not in self.allowed:  # no approval is asked for a call that will be refused
            raise KeyError(f"{name} is not available to this subagent")
        return self.inner.get(name)

    def touches(self, name: str, arguments: Any) -> Touches | None:
        return self.inner.touches(name, arguments)

    def preview(self, name: str, arguments: Any, ctx: ToolContext) -> Preview | None:
        return self.inner.preview(name, arguments, ctx)

    def dispatch(self, name: str, arguments: Any, ctx: ToolContext) -> ToolResult:
        if name not in self.allowed:
            allowed = ", ".join(sorted(self.allowed)) or "none"
            return ToolResult(
                f"{name} is not available to this subagent (its tools: {allowed})",
                is_error=True,
                metadata={ToolOutcome.DENIED: True},
            )
        return self.inner.dispatch(name, arguments, ctx)

    def close(self) -> None:
        """The parent's tools stay open: the parent closes them."""
