"""A file's map, for a file over the per-file cap: its top-level symbols and the members of its
top-level classes, one `line: text` each, with the line numbers an agent can read_file.

Python is parsed with `ast`: what is inside a string literal is text, never a definition (a
Textual widget's DEFAULT_CSS at column 0 does not end its class; numpy's add_newdocs calls and
f2py's C-in-strings define nothing, so those files have no outline to rank with). Other
languages use line patterns for the common keywords (JS/TS, Go, Rust, C/C++, Java, Ruby,
shell): a grammar per language was not worth its wheels for a map of top-level names.
"""

from __future__ import annotations

import ast
import bisect
import re

from .scan import KEYWORDS, string_spans

_TOP_LEVEL = re.compile(rf"^{KEYWORDS}|^([A-Z][A-Z0-9_]{{2,}})\s*[:=]")
_CONTAINERS = re.compile(
    r"^(?:export\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:abstract\s+|final\s+)?"
    r"(?:class|struct|impl|trait|interface|object|enum|module)\b"
)
_MEMBER = re.compile(rf"^(?: {{2,4}}|\t){KEYWORDS}")
_CONSTANT = re.compile(r"[A-Z][A-Z0-9_]{2,}$")
_NL = re.compile(r"\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # str.splitlines()'s
_PY_NEWLINE = re.compile(r"\r\n|\r|\n")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _python_lines(tree: ast.Module) -> list[int]:
    lines: list[int] = []
    for node in tree.body:
        if isinstance(node, _DEFS):
            lines.append(node.lineno)
            if isinstance(node, ast.ClassDef):
                lines += [m.lineno for m in node.body if isinstance(m, _DEFS)]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and _CONSTANT.match(t.id) for t in targets):
                lines.append(node.lineno)
    return lines


def _pattern_lines(lines: list[str], skip: set[int] | frozenset[int] = frozenset()) -> list[int]:
    out: list[int] = []
    in_container = False
    for n, line in enumerate(lines, 1):
        if n in skip:
            continue
        if _TOP_LEVEL.match(line):
            in_container = bool(_CONTAINERS.match(line))
        elif not (in_container and _MEMBER.match(line)):
            if line[:1] not in ("", " ", "\t", "}", ")", "]", "#", "/", "*", "@"):
                in_container = False  # other top-level code ends the container
            continue
        out.append(n)
    return out


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def quick_outline(text: str, path: str = "") -> str:
    """The line-pattern outline (Python: lines inside triple-quoted strings skipped): what
    ranking weighs a big file's outline by before `outline` (ast) is paid for the chosen."""
    lines = text.splitlines()
    skip: set[int] = set()
    if path.endswith((".py", ".pyi")) and ('"""' in text or "'''" in text):
        spans = string_spans(text)
        starts = [0] + [m.end() for m in _NL.finditer(text)]  # where splitlines() lines start
        skip = {
            n for n in range(1, len(lines) + 1) if bisect.bisect_right(spans, starts[n - 1]) % 2
        }
    numbers = _pattern_lines(lines, skip)
    return "".join(f"{n}: {lines[n - 1].rstrip()[:160]}\n" for n in numbers[:400])


def outline(text: str, path: str = "", max_lines: int = 400) -> str:
    """The map of `text` (Python when `path` ends in .py/.pyi, or when no path is given and it
    parses as Python; else the line patterns). "" when it defines nothing."""
    python = path.endswith((".py", ".pyi")) or not path
    tree = _parse(text) if python else None
    if tree is not None:  # ast's line numbers count \r\n, \r and \n only
        lines = _PY_NEWLINE.split(text)
        numbers = _python_lines(tree)
    else:
        lines = text.splitlines()
        numbers = _pattern_lines(lines)
    out: list[str] = []
    for n in numbers:
        if n > len(lines):
            break
        out.append(f"{n}: {lines[n - 1].rstrip()[:160]}")
        if len(out) >= max_lines:
            out.append("...")
            break
    return "\n".join(out) + ("\n" if out else "")
