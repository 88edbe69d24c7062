"""The `---` header of a Markdown file (commands, skills, agents): a small YAML subset.

Claude Code's files use flat `key: value` lines, sometimes a `[a, b]` or `- item` list and
quoted strings; that is all this reads (no PyYAML dependency for three keys). Unknown shapes
stay strings (a list inside a list is text), so a file never fails to load over a field we do
not use.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .host_read import HostReader, ReadRefused

# The names a definition file may give itself. A command's or skill's becomes `/NAME` in the
# `/` menu (a command in a subfolder is `folder:name`); an agent's is lowercase, as in Claude
# Code, since the model spells it in the task tool's arguments.
COMMAND_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
AGENT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Document:
    meta: dict[str, str | list[str]] = field(default_factory=dict)
    body: str = ""

    def text(self, key: str, default: str = "") -> str:
        v = self.meta.get(key, default)
        return ", ".join(v) if isinstance(v, list) else str(v)

    def names(self, key: str) -> tuple[str, ...]:
        """A list field, given as a YAML list or one comma/space separated string."""
        v = self.meta.get(key)
        if v is None or v == "":
            return ()
        items = v if isinstance(v, list) else str(v).replace(",", " ").split()
        return tuple(str(i).strip() for i in items if str(i).strip())


def _text(raw: str) -> str:
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    return raw


def _scalar(raw: str) -> str | list[str]:
    """A value: a `[a, b]` flow list (its items are text, never lists again), else text."""
    raw = raw.strip()
    if raw.startswith("[") and raw.endswith("]"):
        return [_text(x) for x in raw[1:-1].split(",") if x.strip()]
    return _text(raw)


def parse(text: str) -> Document:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        return Document({}, text)
    meta: dict[str, str | list[str]] = {}
    last: str | None = None
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return Document(meta, "\n".join(lines[i + 1 :]).lstrip("\n"))
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("- ") and last is not None:
            prev = meta.get(last)
            meta[last] = [*(prev if isinstance(prev, list) else []), _text(stripped[2:])]
            continue
        key, sep, value = line.partition(":")
        if sep and not line[:1].isspace():
            last = key.strip()
            meta[last] = _scalar(value) if value.strip() else ""
        elif last is not None and isinstance(meta.get(last), str):  # a folded continuation
            meta[last] = f"{meta[last]} {stripped}".strip()
    return Document({}, text)  # no closing ---: not a header after all


def definition_files(roots: Iterable[Path], pattern: str) -> Iterator[tuple[Path, Path]]:
    """(root, file) for each file matching `pattern` (a glob) below each root, the roots in the
    order given (the caller keeps the first of a name: the project before the user) and each
    root's files sorted. A root that is not a directory is passed over."""
    for root in roots:
        if root.is_dir():
            for path in sorted(root.glob(pattern)):
                yield root, path


def read_named(
    path: Path, fallback_name: str, valid_name: re.Pattern[str], reader: HostReader
) -> tuple[Document, str, str] | str:
    """(document, name, description) of a skill or agent file, or why it cannot be used: unreadable
    or refused by the host read policy (`reader`), or "" when its name (`name`, else
    fallback_name) does not match valid_name or it has no description (the caller says that in
    its own words)."""
    try:
        doc = parse(reader.read_text(path))
    except ReadRefused as e:
        return e.why
    name = doc.text("name") or fallback_name
    desc = doc.text("description")
    if not valid_name.match(name) or not desc:
        return ""
    return doc, name, desc
