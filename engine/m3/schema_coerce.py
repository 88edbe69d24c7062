"""Typing of tool-call argument text by JSON schema (SPEC §4.3, vLLM's coerce_to_schema_type).

Deliberately stricter than vLLM where the Addendum says so: integers are `[+-]?digits` only
(Python's int() would take `1_000`), numbers follow JSON's number grammar.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")
_INT_RE = re.compile(r"[+-]?\d+")
_NUM_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
# Python refuses int() of longer strings (sys.get_int_max_str_digits); such text stays a string.
_MAX_INT_DIGITS = 4000
_JSON_TYPE = {type(None): "null", bool: "boolean", int: "integer", float: "number", str: "string"}


def _value_type(v: Any) -> str:
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return _JSON_TYPE.get(type(v), "string")


def schema_types(schema: Any, _depth: int = 0) -> set[str]:
    """Every JSON type `schema` admits: from `type`, `enum` values and anyOf/oneOf/allOf."""
    if not isinstance(schema, dict) or _depth > 32:
        return set()
    out: set[str] = set()
    t = schema.get("type")
    if isinstance(t, str):
        out.add(t)
    elif isinstance(t, list):
        out.update(x for x in t if isinstance(x, str))
    enum = schema.get("enum")
    if isinstance(enum, list):
        out.update(_value_type(v) for v in enum)
    if "const" in schema:
        out.add(_value_type(schema["const"]))
    for key in ("anyOf", "oneOf", "allOf"):
        alts = schema.get(key)
        if isinstance(alts, list):
            for alt in alts:
                out |= schema_types(alt, _depth + 1)
    return out


def coerce_leaf(text: str, schema: Any) -> Any:
    """Convert a leaf's raw text to the highest-priority type of `schema` that accepts it."""
    types = schema_types(schema)
    if not types:
        return text
    s = text.strip()
    if not s and "string" not in types:
        if "object" in types:
            return {}
        if "array" in types:
            return []
    for t in _PRIORITY:
        if t not in types:
            continue
        if t == "null" and s == "null":
            return None
        if t == "integer" and _INT_RE.fullmatch(s) and len(s) <= _MAX_INT_DIGITS:
            return int(s)
        if t == "number" and _NUM_RE.fullmatch(s):
            f = float(s)
            if math.isfinite(f):
                if _INT_RE.fullmatch(s):
                    return int(s) if len(s) <= _MAX_INT_DIGITS else f
                return int(f) if f.is_integer() else f
        if t == "boolean" and s.lower() in ("true", "false", "1", "0"):
            return s.lower() in ("true", "1")
        if t in ("object", "array") and s[:1] in "{[":
            try:
                v = json.loads(s)
            except (ValueError, RecursionError):  # RecursionError: absurdly deep JSON text
                continue
            if isinstance(v, dict if t == "object" else list):
                return v
        if t == "string":
            return text
    return text


def container_kind(schema: Any, _depth: int = 0) -> tuple[str, Any] | None:
    """('array', items schema) or ('object', schema) for an element that has children.

    The first array/object alternative found through `type`, `items`, `properties`, then
    anyOf/oneOf/allOf; None when the schema says neither.
    """
    if not isinstance(schema, dict) or _depth > 32:
        return None
    t = schema.get("type")
    for name in [t] if isinstance(t, str) else (t if isinstance(t, list) else []):
        if name == "array":
            return ("array", schema.get("items"))
        if name == "object":
            return ("object", schema)
    if "items" in schema:
        return ("array", schema.get("items"))
    if "properties" in schema or "additionalProperties" in schema:
        return ("object", schema)
    for key in ("anyOf", "oneOf", "allOf"):
        alts = schema.get(key)
        if isinstance(alts, list):
            for alt in alts:
                found = container_kind(alt, _depth + 1)
                if found is not None:
                    return found
    return None


def property_schema(obj_schema: Any, name: str) -> Any:
    """The schema of property `name` of an object schema (additionalProperties for unknowns)."""
    if not isinstance(obj_schema, dict):
        return None
    props = obj_schema.get("properties")
    if isinstance(props, dict) and name in props:
        return props[name]
    extra = obj_schema.get("additionalProperties")
    return extra if isinstance(extra, dict) else None
