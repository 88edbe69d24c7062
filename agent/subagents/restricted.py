"""A child's tools: the parent's full list in the prompt (so the child's prompt opens with the
parent's cached prefix, tools included), but only its agent's subset may run."""

from __future__ import annotations

from typing import TYPE_CHECKING

from m3agent.tools.gated_toolset import GatedToolset

if TYPE_CHECKING:
    from m3agent.tools.toolset import ToolsetProtocol


class RestrictedToolset(GatedToolset):
    def __init__(self, inner: ToolsetProtocol, allowed: frozenset[str]) -> None:
        super().__init__(inner)
        self.allowed = allowed

    def refused(self, name: str) -> bool:
        return name not in self.allowed

    def unavailable(self, name: str) -> str:
        return f"{name} is not available to this subagent"

    def denial(self, name: str) -> str:
        allowed = ", ".join(sorted(self.allowed)) or "none"
        return f"{name} is not available to this subagent (its tools: {allowed})"

    def close(self) -> None:
        """The parent's tools stay open: the parent closes them."""
