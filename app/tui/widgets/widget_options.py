"""The keywords the widgets here pass on to their Textual base class."""

from __future__ import annotations

from typing import TypedDict


class WidgetOptions(TypedDict, total=False):
    """`**kwargs: Unpack[WidgetOptions]`: the id and classes every Textual widget takes
    (not `name`: ToolCard's `name` is the tool's)."""

    id: str | None
    classes: str | None
