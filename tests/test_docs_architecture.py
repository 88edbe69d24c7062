"""docs/architecture.md names files and functions at every hop of its three flows; this keeps
those names true. A rename that leaves the page behind fails here, not in a newcomer's grep.

Every `path.py` in backticks must be a file of the repository; every `path.py:name` must also
define `name` (a def or class anywhere in it), and `path.py:Class.member` a member defined in
that class's body; every `folder/` must be a folder. The files are parsed, never imported (no
torch, no textual needed).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"

# `path.py` or `path.py:name` or `path.py:Class.member`, as the whole of a code span
_REF = re.compile(r"`([\w./-]+\.py)(?::([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*))?`")
_DIR = re.compile(r"`([\w-]+(?:/[\w-]+)*/)`")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _defined(node: ast.AST, name: str) -> list[ast.AST]:
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return [n for n in ast.walk(node) if isinstance(n, kinds) and n.name == name]


def _has(path: Path, dotted: str) -> bool:
    first, *rest = dotted.split(".")
    scopes = _defined(_tree(path), first)
    for part in rest:  # a member: defined directly in the body of the class found so far
        scopes = [
            n
            for scope in scopes
            if isinstance(scope, ast.ClassDef)
            for n in scope.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and n.name == part
        ]
    return bool(scopes)


def stale_references(text: str, root: Path = ROOT) -> list[str]:
    """The references in TEXT that name no file, or a name the file does not define."""
    bad = []
    for path, name in _REF.findall(text):
        file = root / path
        if not file.is_file():
            bad.append(f"{path}: no such file")
        elif name and not _has(file, name):
            bad.append(f"{path}:{name}: not defined there")
    for folder in _DIR.findall(text):
        if not (root / folder).is_dir():
            bad.append(f"{folder}: no such folder")
    return bad


def test_every_named_file_and_function_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert len(_REF.findall(text)) > 100  # the three flows name a hop per line
    assert stale_references(text) == []


def test_a_made_up_name_is_caught() -> None:
    """The control: the check above would pass on a page it cannot read."""
    text = (
        "`app/cli.py:run_cli` `app/cli.py:no_such_function` `app/no_such_module.py` "
        "`agent/session.py:Session.submit` `agent/session.py:Session.no_such_method` "
        "`agent/session.py:run_cli.submit` `agent/context/` `agent/no_such_folder/`"
    )
    assert stale_references(text) == [
        "app/cli.py:no_such_function: not defined there",
        "app/no_such_module.py: no such file",
        "agent/session.py:Session.no_such_method: not defined there",
        "agent/session.py:run_cli.submit: not defined there",
        "agent/no_such_folder/: no such folder",
    ]


def test_links_resolve_and_the_page_is_linked() -> None:
    text = DOC.read_text(encoding="utf-8")
    for target in _LINK.findall(text):
        assert (DOC.parent / target).is_file(), target
    assert "(docs/architecture.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
