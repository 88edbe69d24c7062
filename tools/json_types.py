"""JSON values as types: what json.loads returns and json.dumps takes (a server's structured
content, a schema, a front matter's fields)."""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = "str | int | float | bool | None | list[JSONValue] | dict[str, JSONValue]"
JSONObject: TypeAlias = "dict[str, JSONValue]"
