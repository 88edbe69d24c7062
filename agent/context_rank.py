"""Ranking for a repository larger than the budget, like a repo map: value per token.

A file's value is how much the rest of the repository leans on it: for each symbol it defines
(functions, classes, types, constants, and its own module name) the number of times other files
mention that identifier, damped with log1p so that a name like `run` cannot drown the rest.
Its score is that value per token of its section, times a weight for its kind: translations,
data, fixtures, tests and prose under docs/ are down-weighted (bulky, and rarely what an
agent needs first). Files an agent always needs are pinned ahead of everything: READMEs, AGENTS.md /
CLAUDE.md, build manifests and package entry points.

Scores are exactly reproducible: terms are summed with math.fsum in sorted order, never in the
iteration order of a set (which changes with PYTHONHASHSEED between runs). Pure text, no
parsers: it must stay fast on 10,000 files and work for any language.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
# Definitions in the common languages: Python, JS/TS, Go, Rust, C/C++, Java, Ruby, shell.
_KEYWORDS = (
    r"(?:export\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:default\s+)?"
    r"(?:def|class|function|func|fn|struct|enum|trait|interface|type|impl|module|const|let|var"
    r"|static|typedef|object|record|macro_rules!)\s+\*?([A-Za-z_][A-Za-z0-9_]{2,})"
)
_DEFINES = re.compile(rf"^[ \t]*{_KEYWORDS}|^([A-Z][A-Z0-9_]{{2,}})\s*[:=]", re.MULTILINE)
_TOP_LEVEL = re.compile(rf"^{_KEYWORDS}|^([A-Z][A-Z0-9_]{{2,}})\s*[:=]")
_COMMON = frozenset(
    "self cls None True False return import from main init test tests args kwargs name value "
    "data type str int list dict new get set run the and for not".split()
)
_DOC_LIFT = {"readme": 3.0, "agents": 3.0, "claude": 3.0, "architecture": 2.0, "contributing": 1.0}

PINNED = 1e6  # added to a pinned file's score: ahead of any value per token
MIN_COST_TOKENS = 64  # a tiny file does not get an unbounded value per token

# ---- kinds of files --------------------------------------------------------------------------

MANIFESTS = frozenset(
    "pyproject.toml setup.py setup.cfg requirements.txt package.json tsconfig.json Cargo.toml "
    "go.mod CMakeLists.txt Makefile makefile meson.build pom.xml build.gradle build.gradle.kts "
    "settings.gradle Gemfile composer.json mix.exs Package.swift pubspec.yaml BUILD.bazel "
    "WORKSPACE deno.json environment.yml".split()
)
_LANGS = frozenset(
    "ar bg bn cn cs da de el es et fa fi fr he hi hu id it ja jp ko kr lt lv ms nl no pl pt "
    "ro ru sk sl sr sv th tr tw uk ur vi zh br".split()
)
_LANG_SUFFIX = re.compile(r"[._-]([a-z]{2})(?:[-_]([a-z]{2,4}))?$", re.IGNORECASE)
_TRANSLATION_DIRS = frozenset(
    "i18n l10n locale locales translations translation lang langs".split()
)
_FIXTURE_DIRS = frozenset(
    "fixtures fixture testdata test_data test-data __fixtures__ __snapshots__ snapshots golden "
    "goldens expected cassettes mocks".split()
)
_DATA_DIRS = frozenset("data datasets dataset samples assets static examples_data".split())
_DATA_EXT = frozenset("json xml txt dat yaml yml toml csv tsv html".split())
_TEST_DIRS = frozenset("tests test testing __tests__ spec specs e2e benchmarks bench".split())
_TEST_NAME = re.compile(
    r"^(?:test_.+\.py|.+_test\.py|conftest\.py|.+_test\.go|.+\.(?:test|spec)\.[jt]sx?|.+Test\.java"
    r"|.+_spec\.rb|test_.+\.rs)$"
)
_DOC_DIRS = frozenset("docs doc documentation".split())
_PROSE_EXT = frozenset("md rst txt adoc".split())
WEIGHTS = {
    "translation": 0.05,
    "data": 0.1,
    "fixture": 0.2,
    "test": 0.3,
    "docs": 0.5,
    "source": 1.0,
}


def _parts(path: str) -> tuple[list[str], str]:
    segs = path.split("/")
    return segs[:-1], segs[-1]


_WORKSPACE_MANIFESTS = frozenset("pyproject.toml package.json Cargo.toml go.mod".split())


def is_pinned(path: str) -> bool:
    """READMEs (root or one level down), AGENTS.md/CLAUDE.md, build manifests (root, or a
    workspace member's), package entry points (pkg/__init__.py, src/pkg/__init__.py,
    src/lib.rs, cmd/x/main.go, index.js...)."""
    if kind(path) != "source":
        return False
    dirs, base = _parts(path)
    depth = len(dirs)
    stem = base.split(".", 1)[0].lower()
    if stem in ("readme", "agents", "claude") and depth <= 1:
        return True
    if base in MANIFESTS and (depth == 0 or (depth == 1 and base in _WORKSPACE_MANIFESTS)):
        return True
    if base in ("__init__.py", "__main__.py"):
        return depth == 1 or (depth == 2 and dirs[0] in ("src", "lib"))
    if base in ("lib.rs", "main.rs"):
        return dirs == ["src"]
    if base == "main.go":
        return depth == 0 or (depth == 2 and dirs[0] == "cmd")
    if base in ("index.js", "index.ts", "index.mjs", "main.js", "main.ts"):
        return depth == 0 or dirs in (["src"], ["lib"])
    return base in ("main.py", "cli.py", "app.py", "main.c", "main.cpp") and depth == 0


def kind(path: str) -> str:
    """ "translation" | "data" | "fixture" | "test" | "source" (the weight it gets)."""
    dirs, base = _parts(path)
    low = [d.lower() for d in dirs]
    stem, _, ext = base.rpartition(".")
    if not stem:
        stem, ext = base, ""
    m = _LANG_SUFFIX.search(stem)
    if (m and m.group(1).lower() in _LANGS and ext.lower() in ("md", "rst", "txt", "adoc")) or (
        ext.lower() in ("po", "pot", "mo")
    ):
        return "translation"
    if any(d in _TRANSLATION_DIRS for d in low) or (
        "docs" in low and any(d in _LANGS or d.split("-")[0] in _LANGS for d in low)
    ):
        return "translation"
    if any(d in _FIXTURE_DIRS for d in low):
        return "fixture"
    if any(d in _TEST_DIRS for d in low) or _TEST_NAME.match(base):
        return "test"
    if any(d in _DATA_DIRS for d in low) and ext.lower() in _DATA_EXT:
        return "data"
    if ext.lower() in ("json", "xml", "dat") and base not in MANIFESTS:
        return "data"
    if any(d in _DOC_DIRS for d in low) and ext.lower() in _PROSE_EXT and stem.lower() != "readme":
        return "docs"
    return "source"


def defined_symbols(text: str) -> set[str]:
    out: set[str] = set()
    for m in _DEFINES.finditer(text):
        name = m.group(1) or m.group(2)
        if name and name not in _COMMON:
            out.add(name)
    return out


def _stem(path: str) -> str:
    base = path.rsplit("/", 1)[-1]
    return base.split(".", 1)[0]


def file_value(path: str, text: str, own: Counter[str], total: Counter[str]) -> float:
    """log1p-damped references from elsewhere to what the file defines, plus a doc lift."""
    names = defined_symbols(text)
    stem = _stem(path)
    if len(stem) >= 3 and stem not in _COMMON:
        names.add(stem)
    terms = [math.log1p(total[n] - own[n]) for n in sorted(names) if total[n] - own[n] > 0]
    lift = _DOC_LIFT.get(stem.lower(), 0.0) * (2.0 if "/" not in path else 1.0)
    return math.fsum(terms) + lift


def rank_scores(
    texts: Mapping[str, str], tokens: Mapping[str, int] | None = None
) -> dict[str, float]:
    """path -> score (higher first): pinned files first, then value per token times the kind's
    weight. `tokens`: each file's section size (default: its characters / 4). Exactly the same
    numbers for the same texts, in any process."""
    per_file: dict[str, Counter[str]] = {}
    total: Counter[str] = Counter()
    for path in sorted(texts):
        c = Counter(_IDENT.findall(texts[path]))
        per_file[path] = c
        total.update(c)
    scores: dict[str, float] = {}
    for path in sorted(texts):
        text = texts[path]
        value = file_value(path, text, per_file[path], total)
        size = tokens[path] if tokens is not None and path in tokens else len(text) // 4 + 1
        score = value / max(size, MIN_COST_TOKENS) * WEIGHTS[kind(path)]
        if is_pinned(path):
            score += PINNED + value
        scores[path] = score
    return scores


_CONTAINERS = re.compile(
    r"^(?:export\s+)?(?:pub(?:\([^)]*\))?\s+)?(?:abstract\s+|final\s+)?"
    r"(?:class|struct|impl|trait|interface|object|enum|module)\b"
)
_MEMBER = re.compile(rf"^(?: {{2,4}}|\t){_KEYWORDS}")


def outline(text: str, max_lines: int = 400) -> str:
    """A file's map for when it is over the per-file cap: its top-level symbols and the members
    of its top-level classes (one level down), one `line: text` each."""
    out: list[str] = []
    in_container = False
    for n, line in enumerate(text.splitlines(), 1):
        if _TOP_LEVEL.match(line):
            in_container = bool(_CONTAINERS.match(line))
        elif not (in_container and _MEMBER.match(line)):
            if line[:1] not in ("", " ", "\t", "}", ")", "]", "#", "/", "*", "@"):
                in_container = False  # other top-level code ends the container
            continue
        out.append(f"{n}: {line.rstrip()[:160]}")
        if len(out) >= max_lines:
            out.append("...")
            break
    return "\n".join(out) + ("\n" if out else "")
