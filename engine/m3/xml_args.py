"""The element grammar inside one `<invoke>` body, and its conversion to typed arguments.

Grammar (SPEC §4.2–4.3): only `NS<name>` opens an element and only `NS</name>` closes it; a
leaf's value is the raw text between its tags (not stripped, not entity-decoded); children
make an object, or a list when the schema says array; repeated names at one level collect into
a list; non-whitespace text mixed with children goes under "$text" (stripped: it sits
between tags, where whitespace is layout). Parsing stops at the first
malformed or unterminated element and keeps the finished top-level parameters before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from m3agent.engine.m3.schema_coerce import coerce_leaf, container_kind, property_schema
from m3agent.engine.m3.tokens import NS

MAX_DEPTH = 128
_OPEN = NS + "<"
_BAD_NAME_CHARS = frozenset(" \t\r\n\f\v<>/\"'=")


class Status(Enum):
    COMPLETE = "complete"  # the closing tag of the level was found
    INCOMPLETE = "incomplete"  # the text ended first (more may come, or it was truncated)
    MALFORMED = "malformed"  # a tag that cannot be right: parsing stops here for good


@dataclass(slots=True)
class Element:
    name: str
    children: list[Element] = field(default_factory=list)
    text: str = ""  # the raw text of a leaf, or the text mixed between children


@dataclass(frozen=True, slots=True)
class BodyParse:
    params: list[Element]  # finished top-level parameters, in order
    status: Status
    end: int  # COMPLETE: just past NS</invoke>; MALFORMED: where the bad tag starts
    # INCOMPLETE only: True when it stopped inside a tag waiting for '>', False when it ran
    # out of text looking for the next `NS<`. A streaming caller re-parses only when new text
    # could change that (a '>' resp. a new `NS<`), which keeps long values linear.
    needs_gt: bool = False


def _valid_name(name: str) -> bool:
    return bool(name) and not (_BAD_NAME_CHARS & set(name)) and "]<]" not in name


def _parse_level(
    text: str, pos: int, closer: str, depth: int
) -> tuple[list[Element], str, Status, int]:
    """Children, mixed text, status, end; INCOMPLETE's end is -1 inside a tag (needs '>')."""
    children: list[Element] = []
    texts: list[str] = []
    while True:
        i = text.find(_OPEN, pos)
        if i < 0:
            texts.append(text[pos:])
            return children, "".join(texts), Status.INCOMPLETE, len(text)
        texts.append(text[pos:i])
        j = i + len(_OPEN)
        gt = text.find(">", j)
        if gt < 0:
            return children, "".join(texts), Status.INCOMPLETE, -1
        tag = text[j:gt]
        if tag.startswith("/"):
            if tag[1:] == closer:
                return children, "".join(texts), Status.COMPLETE, gt + 1
            return children, "".join(texts), Status.MALFORMED, i
        if not _valid_name(tag) or depth + 1 > MAX_DEPTH:
            return children, "".join(texts), Status.MALFORMED, i
        sub, sub_text, status, end = _parse_level(text, gt + 1, tag, depth + 1)
        if status is not Status.COMPLETE:
            return children, "".join(texts), status, end
        children.append(Element(tag, sub, sub_text))
        pos = end


def parse_invoke_body(body: str) -> BodyParse:
    """Parse the text after `<invoke name=...>` up to and including `NS</invoke>`."""
    params, _, status, end = _parse_level(body, 0, "invoke", 0)
    if status is Status.INCOMPLETE:
        return BodyParse(params, status, len(body), needs_gt=end < 0)
    return BodyParse(params, status, end)


# ---- conversion ----------------------------------------------------------------------------


def _convert(el: Element, schema: Any) -> Any:
    if not el.children:
        return el.text if schema is None else coerce_leaf(el.text, schema)
    kind = container_kind(schema)
    if kind is not None and kind[0] == "array":
        return [_convert(c, kind[1]) for c in el.children]
    return _convert_object(el.children, el.text, kind[1] if kind is not None else None)


def _convert_object(children: list[Element], text: str, schema: Any) -> dict[str, Any]:
    groups: dict[str, list[Element]] = {}
    for c in children:
        groups.setdefault(c.name, []).append(c)
    out: dict[str, Any] = {}
    for name, els in groups.items():
        ps = property_schema(schema, name)
        if len(els) == 1:
            out[name] = _convert(els[0], ps)
            continue
        # A repeated name is a list; when the property is an array, each repeat is one item.
        kind = container_kind(ps)
        item_schema = kind[1] if kind is not None and kind[0] == "array" else ps
        out[name] = [_convert(e, item_schema) for e in els]
    if text.strip():
        out["$text"] = text.strip()
    return out


def convert_arguments(params: list[Element], parameters_schema: Any) -> dict[str, Any]:
    """Typed arguments of one invoke; `parameters_schema` is its own tool's schema (or None).

    Text between top-level parameters is ignored (there is no "$text" at the invoke level).
    """
    schema = parameters_schema if isinstance(parameters_schema, dict) else None
    return _convert_object(params, "", schema)


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
