"""GatedToolset: the inner list in the prompt, a refused tool refused in get (no approval is
asked) and in dispatch (a denied result), the rest passed through."""

from __future__ import annotations

import pytest
from m3agent.tools.base import ToolOutcome
from m3agent.tools.gated_toolset import GatedToolset
from m3agent.tools.toolset import default_toolset


class _NoWrites(GatedToolset):
    def refused(self, name: str) -> bool:
        return name == "write_file"

    def unavailable(self, name: str) -> str:
        return f"{name}: not here"

    def denial(self, name: str) -> str:
        return f"not run: {name}"


def test_refused_in_get_and_dispatch_and_the_rest_passed_through():
    inner = default_toolset()
    gated = _NoWrites(inner)
    assert gated.schemas() == inner.schemas()
    with pytest.raises(KeyError, match="write_file: not here"):
        gated.get("write_file")
    assert gated.get("read_file") is inner.get("read_file")
    result = gated.dispatch("write_file", {"path": "x", "content": ""}, None)  # type: ignore[arg-type]
    assert result.is_error and result.output == "not run: write_file"
    assert result.metadata == {ToolOutcome.DENIED: True}
    assert gated.touches("read_file", {"path": "a"}) == inner.touches("read_file", {"path": "a"})
