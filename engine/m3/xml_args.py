"""The element grammar inside one `<invoke>` body, and its conversion to typed arguments.

Grammar, as vLLM 0.33.0 reads it (SPEC §4.2-4.3; `parser/minimax_m3.py::_parse_element`,
`_parse_invoke_params`, `_convert_element`, `_convert_object`):

* `NS<name>` opens an element; its name is everything up to the next `>` (not empty, not
  starting with `/`); only the exact `NS</name>` closes it.
* Inside a value, every `NS` must start the closing tag or a child element: any other `NS`
  (a stray namespace token) makes the element malformed.
* A leaf's value is the raw text between its tags (not stripped, not entity-decoded). With
  children, the element is an object (or a list when its schema is an array); non-whitespace
  text mixed with the children is kept, raw, under "$text" (or "$$text"... when a child has
  that name), as one more child.
* The invoke body is a sequence of elements separated by whitespace; parsing stops at the
  first thing that is not a well-formed element (prose, a malformed or unterminated element),
  keeping the parameters before it.
"""

from __future__ import annotations

from typing import Any, Union

from .schema_coerce import (
    coerce_text,
    container_schema,
    properties_of,
    schema_types,
)
from .tokens import NS

MAX_DEPTH = 128  # top-level parameters are depth 1
MIXED_TEXT = "$text"
_OPEN = NS + "<"

# A leaf's raw text, or an element's (name, value) children in order.
Value = Union[str, list[tuple[str, "Value"]]]  # noqa: UP007 (a recursive alias needs a string)


def _element(text: str, pos: int, depth: int) -> tuple[str, Value, int] | None:
    """The element whose `NS<` starts at `pos`: (name, value, end), or None if malformed."""
    if depth > MAX_DEPTH:
        return None
    start = pos + len(_OPEN)
    gt = text.find(">", start)
    if gt <= start:
        return None
    name = text[start:gt]
    if name.startswith("/") or not name.strip():
        return None
    closer = f"{NS}</{name}>"
    pos = gt + 1
    pieces: list[str] = []
    children: list[tuple[str, Value]] = []
    while True:
        ns = text.find(NS, pos)
        if ns < 0:
            return None  # unterminated
        pieces.append(text[pos:ns])
        if text.startswith(closer, ns):
            pos = ns + len(closer)
            break
        if not text.startswith(_OPEN, ns):
            return None  # a stray NS inside the value
        child = _element(text, ns, depth + 1)
        if child is None:
            return None
        children.append((child[0], child[1]))
        pos = child[2]
    body = "".join(pieces)
    if not children:
        return name, body, pos
    if body.strip():
        key = MIXED_TEXT
        while any(n == key for n, _ in children):
            key = "$" + key
        children.append((key, body))
    return name, children, pos


def parse_invoke_body(body: str) -> list[tuple[str, Value]]:
    """The parameters of one invoke body (the text between its header and `NS</invoke>`)."""
    params: list[tuple[str, Value]] = []
    pos, n = 0, len(body)
    while True:
        while pos < n and body[pos].isspace():
            pos += 1
        if not body.startswith(_OPEN, pos):
            return params
        el = _element(body, pos, 1)
        if el is None:
            return params
        params.append((el[0], el[1]))
        pos = el[2]


# ---- conversion ----------------------------------------------------------------------------


def _convert(value: Value, schema: Any) -> Any:
    if not isinstance(schema, dict):
        schema = None
    container = container_schema(schema) if schema is not None else None
    if isinstance(value, str):
        if schema is None:
            return value  # no schema: leaves stay strings
        types = schema_types(schema)
        # the template renders an empty list or dict as an empty element
        if container is not None and "string" not in types and not value.strip():
            return [] if container[0] == "array" else {}
        return coerce_text(value, types)
    if container is not None and container[0] == "array":
        items = container[1].get("items")
        return [_convert(child, items) for _, child in value]  # child names are ignored
    return _convert_object(value, container[1] if container is not None else None)


def _convert_object(elements: list[tuple[str, Value]], schema: Any) -> dict[str, Any]:
    props = properties_of(schema)
    extra = schema.get("additionalProperties") if isinstance(schema, dict) else None
    out: dict[str, Any] = {}
    repeated: set[str] = set()
    for name, value in elements:
        converted = _convert(value, props.get(name, extra))
        if name not in out:
            out[name] = converted
        elif name in repeated:
            out[name].append(converted)
        else:  # a repeated name collects its values into a list
            out[name] = [out[name], converted]
            repeated.add(name)
    return out


def convert_arguments(
    params: list[tuple[str, Value]], properties: dict[str, Any] | None
) -> dict[str, Any]:
    """Typed arguments of one invoke, by its own tool's top-level `properties` (or none).

    As in vLLM, the top level uses `properties` only (not the tool's additionalProperties);
    nested objects use their schema's additionalProperties for unknown keys.
    """
    return _convert_object(params, {"properties": properties or {}})


# ---- rendering (the chat template's recursive to_xml macro) ---------------------------------


def to_xml(value: Any) -> str:
    """Render a value the way M3's template renders tool-call arguments in history.

    dict -> `NS<key>..NS</key>` per non-None entry; list -> `NS<item>..NS</item>`;
    booleans as true/false; None omitted; everything else printed as str().
    """
    if isinstance(value, dict):
        return "".join(f"{NS}<{k}>{to_xml(v)}{NS}</{k}>" for k, v in value.items() if v is not None)
    if isinstance(value, list | tuple):
        return "".join(f"{NS}<item>{to_xml(v)}{NS}</item>" for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)
