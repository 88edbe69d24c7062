"""Typing of tool-call argument text by JSON schema, as vLLM 0.33.0 does it for M3.

The rules (SPEC §4.3; vLLM `tool_parsers/utils.py::extract_types_from_schema` and
`coerce_to_schema_type`, `parser/minimax_m3.py::_container_schema`,
`parser/engine/parser_engine.py::_fix_arg_types`):

* the types a schema admits come from `type`, `enum` values and anyOf/oneOf/allOf; a schema
  with none of them admits "string" (so a typeless alternative of an anyOf adds "string");
* a leaf tries null > integer > number > boolean > object > array > string; when no admitted
  type accepts the text, the text is still read as JSON if it is JSON (an integer parameter
  given `4.5` gets 4.5, given `null` gets None), else it stays the raw string;
* object/array accept any JSON value (vLLM does not check that `[1]` is an object).

Deliberately stricter than vLLM where the SPEC's Addendum says so: integers are `[+-]?digits`
and numbers JSON-like decimals (Python's int()/float() would take `1_000`), and absurdly deep
JSON text stays a string instead of raising RecursionError.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")
_INT_RE = re.compile(r"[+-]?\d+")
_NUM_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
# Type names that schemas in the wild use instead of JSON Schema's (vLLM accepts them too).
_ALIASES = {
    **dict.fromkeys(("str", "text", "varchar", "char", "enum"), "string"),
    **dict.fromkeys(
        ("int", "int32", "int64", "uint", "uint32", "uint64", "long", "short", "unsigned"),
        "integer",
    ),
    **dict.fromkeys(("float", "float32", "float64", "double"), "number"),
    "bool": "boolean",
    "dict": "object",
    **dict.fromkeys(("arr", "list", "sequence"), "array"),
}
_MAX_SCHEMA_DEPTH = 64
_NO_JSON = object()


# Python type -> JSON type name, in the order isinstance must try them (bool is an int).
_JSON_TYPES: tuple[tuple[type, str], ...] = (
    (type(None), "null"),
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _value_type(v: Any) -> str | None:
    return next((name for t, name in _JSON_TYPES if isinstance(v, t)), None)


def schema_types(schema: Any, _depth: int = 0) -> set[str]:
    """The JSON types `schema` admits; {"string"} when it says nothing about types."""
    if not isinstance(schema, dict) or _depth > _MAX_SCHEMA_DEPTH:
        return {"string"}
    out: set[str] = set()
    t = schema.get("type")
    if isinstance(t, str):
        out.add(t)
    elif isinstance(t, list):
        out.update(x for x in t if isinstance(x, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        out.update(vt for vt in map(_value_type, enum) if vt is not None)
    for key in ("anyOf", "oneOf", "allOf"):
        alts = schema.get(key)
        if isinstance(alts, list):
            for alt in alts:
                out |= schema_types(alt, _depth + 1)
    return out or {"string"}


def _strict_int(s: str) -> int | None:
    s = s.strip()
    if not _INT_RE.fullmatch(s):
        return None
    try:
        return int(s)
    except ValueError:  # more digits than sys.get_int_max_str_digits()
        return None


def _json_value(text: str) -> Any:
    """json.loads(text) when it is finite JSON, else _NO_JSON."""
    try:
        value = json.loads(text)
        json.dumps(value, allow_nan=False)  # inf/nan anywhere in it is not JSON
    except (ValueError, RecursionError):
        return _NO_JSON
    return value


def coerce_text(text: str, types: set[str] | list[str]) -> Any:
    """Convert raw leaf text to the highest-priority admitted type that accepts it."""
    admitted = {_ALIASES.get(k, k) for k in (t.strip().lower() for t in types)}
    for t in _PRIORITY:
        if t not in admitted:
            continue
        if t == "null":
            if text.lower() == "null":
                return None
        elif t == "string":
            return text
        elif t == "integer":
            n = _strict_int(text)
            if n is not None:
                return n
        elif t == "number":
            n = _strict_int(text)
            if n is not None:
                return n
            s = text.strip()
            if _NUM_RE.fullmatch(s):
                f = float(s)
                if math.isfinite(f):
                    return int(f) if f.is_integer() else f
        elif t == "boolean":
            low = text.lower().strip()
            if low in ("true", "1", "false", "0"):
                return low in ("true", "1")
        else:  # object / array: any JSON value
            v = _json_value(text)
            if v is not _NO_JSON:
                return v
    v = _json_value(text)
    return text if v is _NO_JSON else v


def container_schema(schema: Any, _depth: int = 0) -> tuple[str, dict[str, Any]] | None:
    """("array" | "object", the alternative that says so) for an element with children.

    `type` naming array wins over object; without `type`, `items` means array and
    `properties`/`additionalProperties` object; then the anyOf/oneOf alternatives in order.
    """
    if not isinstance(schema, dict) or _depth > _MAX_SCHEMA_DEPTH:
        return None
    t = schema.get("type")
    for kind in ("array", "object"):
        if t == kind or (isinstance(t, list) and kind in t):
            return kind, schema
    if t is None:
        if "items" in schema:
            return "array", schema
        if "properties" in schema or "additionalProperties" in schema:
            return "object", schema
    for key in ("anyOf", "oneOf"):
        alts = schema.get(key)
        if isinstance(alts, list):
            for alt in alts:
                found = container_schema(alt, _depth + 1)
                if found is not None:
                    return found
    return None


def properties_of(schema: Any) -> dict[str, Any]:
    props = schema.get("properties") if isinstance(schema, dict) else None
    return props if isinstance(props, dict) else {}


# ---- the second pass over converted arguments (vLLM's _fix_arg_types) ------------------------


def _refine_value(value: Any, schema: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return coerce_text(value, schema_types(schema))
    if isinstance(value, dict):
        props = schema.get("properties")
        return refine_arguments(value, props) if isinstance(props, dict) else value
    if isinstance(value, list):
        items = schema.get("items")
        return [_refine_value(v, items) for v in value] if isinstance(items, dict) else value
    redone = coerce_text(json.dumps(value, ensure_ascii=False), schema_types(schema))
    return redone if type(redone) is not type(value) or redone != value else value


def refine_arguments(args: dict[str, Any], properties: dict[str, Any]) -> dict[str, Any]:
    """Re-type converted arguments by the tool's top-level `properties`, recursing through
    nested `properties`/`items`. vLLM applies this after the M3 conversion; it matters where
    the first pass produced a string or JSON value that the schema types further (e.g. an
    integer parameter given `"5"` with quotes: JSON "5" first, then 5)."""
    out = dict(args)
    for key, value in args.items():
        prop = properties.get(key)
        if isinstance(prop, dict):
            out[key] = _refine_value(value, prop)
    return out
