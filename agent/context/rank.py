"""Ranking for a repository larger than the budget, like a repo map: value per token.

A file's value is how much the rest of the repository leans on it: for each symbol it defines
(functions, classes, types, constants, and its own module name) the number of times other files
mention that identifier, damped with log1p so that a name like `run` cannot drown the rest.
Its score is that value per token of its section, times a weight for its kind: translations,
data, fixtures, tests and prose under docs/ are down-weighted (bulky, and rarely what an
agent needs first). Files an agent always needs are pinned ahead of everything: READMEs, AGENTS.md /
CLAUDE.md, build manifests and package entry points.

A `.pyi` stub whose `.py` is in the repository too counts x0.1: the module itself says more.

Scores are exactly reproducible: terms are summed with math.fsum in sorted order, never in the
iteration order of a set (which changes with PYTHONHASHSEED between runs). The features (each
file's words and defined symbols) come from scan.py's one pass, cached by content hash; the
reference totals are one numpy bincount over the words that some file defines.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence

from .scan import COMMON, Record, defined_names, word_counts

_DOC_LIFT = {"readme": 3.0, "agents": 3.0, "claude": 3.0, "architecture": 2.0, "contributing": 1.0}

STUB_WEIGHT = 0.1  # a .pyi next to its .py
PINNED = 1e6  # added to a pinned file's score: ahead of any value per token
MIN_COST_TOKENS = 64  # a tiny file does not get an unbounded value per token
_TOTALS_CHUNK = 2000  # files whose words are split at once (30,000 files' words: ~200 MB)

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
    if base in ("__init__.py", "__main__.py"):  # a package's and its sub-packages' entry points
        return depth <= 2 or (depth == 3 and dirs[0] in ("src", "lib"))
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


def _stem(path: str) -> bytes:
    base = path.rsplit("/", 1)[-1]
    return base.split(".", 1)[0].encode("utf-8", "surrogateescape")


def _doc_lift(path: str) -> float:
    stem = path.rsplit("/", 1)[-1].split(".", 1)[0]
    return _DOC_LIFT.get(stem.lower(), 0.0) * (2.0 if "/" not in path else 1.0)


def _own_names(path: str, rec: Record) -> set[bytes]:
    """What the file defines, with its module name (the symbols its value counts)."""
    names = set(rec.names)
    stem = _stem(path)
    if len(stem) >= 3 and stem not in COMMON:
        names.add(stem)
    return names


def reference_totals(
    records: Mapping[str, Record], paths: Sequence[str] | None = None
) -> dict[bytes, int]:
    """How often each symbol that `paths` (default: every record) define occurs in the whole
    repository. Only those words are counted: a third of the repository's words, looked up
    in one C-level pass (map over dict.get) instead of a vocabulary of all of them."""
    import numpy as np  # here: a warm start that finds its outcome never ranks

    wanted: set[bytes] = set()
    for p in records if paths is None else paths:
        wanted |= _own_names(p, records[p])
    names = sorted(wanted)
    ids = {w: k for k, w in enumerate(names)}
    total = np.zeros(len(ids), dtype=np.int64)
    with_words = [r for p in sorted(records) if (r := records[p]).words_blob]
    for k in range(0, len(with_words) if ids else 0, _TOTALS_CHUNK):  # bounded memory
        part = with_words[k : k + _TOTALS_CHUNK]
        words = b"\n".join(r.words_blob for r in part).split(b"\n")
        counts = np.frombuffer(b"".join(r.counts_blob for r in part), dtype=np.uint32)
        where = np.fromiter(map(ids.get, words, itertools.repeat(-1)), np.int64, len(words))
        hit = where >= 0
        total += np.bincount(where[hit], weights=counts[hit], minlength=len(ids)).astype(np.int64)
    return dict(zip(names, total.tolist(), strict=True))


def file_value(path: str, rec: Record, total: Mapping[bytes, int]) -> float:
    """log1p-damped references from elsewhere to what the file defines, plus a doc lift.
    total: reference_totals (every symbol the file defines among its keys)."""
    names = _own_names(path, rec)
    own = dict(zip(rec.words(), rec.counts(), strict=True)) if names else {}
    terms = []
    for n in sorted(names):
        elsewhere = total.get(n, 0) - own.get(n, 0)
        if elsewhere > 0:
            terms.append(math.log1p(elsewhere))
    return math.fsum(terms) + _doc_lift(path)


def file_values(paths: Sequence[str], records: Mapping[str, Record]) -> dict[str, float]:
    """path -> file_value, with the reference totals over `records` (every candidate)."""
    total = reference_totals(records, paths)
    return {p: file_value(p, records[p], total) for p in sorted(paths)}


def path_weights(
    paths: Sequence[str], records: Mapping[str, Record]
) -> dict[str, tuple[float, bool]]:
    """path -> (its kind's weight, pinned): what the score takes from the path alone."""
    out = {}
    for path in paths:
        weight = WEIGHTS[kind(path)]
        if path.endswith(".pyi") and path[:-1] in records:
            weight *= STUB_WEIGHT
        out[path] = (weight, is_pinned(path))
    return out


def scores_of(
    paths: Sequence[str],
    records: Mapping[str, Record],
    values: Mapping[str, float],
    tokens: Mapping[str, int] | None = None,
    weights: Mapping[str, tuple[float, bool]] | None = None,
) -> dict[str, float]:
    """path -> score (higher first): pinned files first, then value per token times the
    kind's weight. `tokens`: each file's section size (default: its estimate); `weights`:
    path_weights (computed when not given)."""
    if weights is None:
        weights = path_weights(paths, records)
    scores: dict[str, float] = {}
    for path in sorted(paths):
        value = values[path]
        size = tokens[path] if tokens is not None and path in tokens else records[path].est_tokens()
        weight, pinned = weights[path]
        score = value / max(size, MIN_COST_TOKENS) * weight
        if pinned:
            score += PINNED + value
        scores[path] = score
    return scores


def rank_records(
    records: Mapping[str, Record], tokens: Mapping[str, int] | None = None
) -> dict[str, float]:
    """Scores of every record's path; exactly the same numbers for the same records, in any
    process."""
    return scores_of(list(records), records, file_values(list(records), records), tokens)


def rank_scores(
    texts: Mapping[str, str], tokens: Mapping[str, int] | None = None
) -> dict[str, float]:
    """rank_records for texts in memory (default size: characters / 4)."""
    records = {}
    for p, t in texts.items():
        data = t.encode("utf-8", "surrogatepass")
        names = defined_names(data, p.endswith((".py", ".pyi")))
        records[p] = Record.of(len(data), names, word_counts(data))
    sizes = {p: len(t) // 4 + 1 for p, t in texts.items()}
    if tokens is not None:
        sizes.update(tokens)
    return rank_records(records, sizes)
