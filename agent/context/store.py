"""The snapshot's caches across runs, under `<M3AGENT_HOME>/context-cache/`.

- **Records** (`records-<rules>.marshal`): scan.Record per content hash. A changed file is
  scanned again; an unchanged one costs a dictionary lookup.
- **Outcomes** (`plans-<rules>.marshal`, the files' name since the first version: a new one
  would orphan every existing cache): the outcome of a whole build (every file's status,
  tokens, score and reason; the outlines) per *state*, the hash of every candidate's path and
  content hash with the budget, the rules and the tokenizer. A warm start on an unchanged
  repository stats its files (reading only those whose stat changed), finds the outcome, and
  reads only the packed files' text: ranking and counting do not run again.
- **Stats** (`stats-<root>.marshal`, StatIndex): per repository, each file's stat key with
  its content hash, so that a warm start stats files instead of reading them. An entry whose
  mtime or ctime is within RACY_NS of the run that saw it is not kept (it could change again
  within the same timestamp tick unseen).

marshal, not pickle: the data are plain tuples and bytes, and loading it runs no code. A
missing, stale or unreadable cache only costs time; writes are atomic (rename).
"""

from __future__ import annotations

import hashlib
import marshal
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from m3agent.tools.private_fs import write_private

VERSION = 1  # bump when Record or an outcome changes shape or meaning
_MAX_OUTCOMES = 8
_MAX_RECORDS = 400_000


def _load(path: Path | None) -> dict[Any, Any]:
    """The items _save wrote; their shape is the writer's (VERSION vouches for it), so the
    caller's types hold: marshal gives Any, and nothing here checks it again."""
    if path is None:
        return {}
    try:
        data = marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return {}
    items = data.get("items")
    return items if isinstance(items, dict) else {}


def _save(path: Path | None, items: Mapping[str, object] | Mapping[bytes, object]) -> None:
    if path is None:
        return
    try:
        # 0600 in a 0700 directory: the cache holds the repository's text
        write_private(path, marshal.dumps({"version": VERSION, "items": items}))
    except (OSError, ValueError):
        pass  # only a cache


class SnapshotStore:
    """Records and build outcomes for one set of rules; cache_dir None: in memory only."""

    def __init__(self, cache_dir: Path | None, rules_key: str) -> None:
        tag = hashlib.sha1(rules_key.encode()).hexdigest()[:12]
        base = Path(cache_dir) if cache_dir is not None else None
        self._records_path = base / f"records-{tag}.marshal" if base else None
        self._outcomes_path = base / f"plans-{tag}.marshal" if base else None
        # loaded on first use: a warm start may not need it
        self._records: dict[bytes, tuple[Any, ...]] | None = None
        self._outcomes: dict[bytes, object] | None = None
        self._seen: set[bytes] = set()
        self._dirty_records = False

    def record(self, digest: bytes) -> tuple[Any, ...] | None:
        """The plain tuple put_record was given for `digest` (scan.PlainRecord, or the 1-tuple
        of an outline): its items are typed by the caller that knows which it asked for."""
        if self._records is None:
            self._records = _load(self._records_path)
        self._seen.add(digest)
        return self._records.get(digest)

    def put_record(self, digest: bytes, plain: tuple[object, ...]) -> None:
        if self._records is None:
            self._records = _load(self._records_path)
        self._seen.add(digest)
        self._records[digest] = plain
        self._dirty_records = True

    def outcome(self, state: bytes) -> object:
        """The plain outcome put_outcome was given for `state` (outcome.to_plain's), or None."""
        if self._outcomes is None:
            self._outcomes = _load(self._outcomes_path)
        return self._outcomes.get(state)

    def put_outcome(self, state: bytes, plain: object) -> None:
        if self._outcomes is None:
            self._outcomes = _load(self._outcomes_path)
        self._outcomes.pop(state, None)
        self._outcomes[state] = plain  # dicts keep insertion order: the oldest go first
        while len(self._outcomes) > _MAX_OUTCOMES:
            self._outcomes.pop(next(iter(self._outcomes)))
        _save(self._outcomes_path, self._outcomes)

    def save(self) -> None:
        if not self._dirty_records or self._records is None:
            return
        if len(self._records) > _MAX_RECORDS:  # keep this repository's, drop the rest
            self._records = {k: v for k, v in self._records.items() if k in self._seen}
        _save(self._records_path, self._records)
        self._dirty_records = False


# A stat this close to the time of the run that saw it may change again within the same
# timestamp tick unseen (git's "racy" entries): it is not trusted by the next run.
RACY_NS = 2_000_000_000


# (size, mtime_ns, ctime_ns, inode, device)
StatKey = tuple[int, int, int, int, int]


def stat_key(st: os.stat_result) -> StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


class StatIndex:
    """For one repository root (`stats-<root>.marshal`): each file's stat key (size, mtime,
    ctime, inode, device) with the SHA-1 of its bytes as last read. A warm start whose file
    has the same key takes that hash instead of reading the file; every file that is packed is
    still read, through the guards, and its bytes checked against the hash."""

    def __init__(self, cache_dir: Path | None, root: Path, rules_key: str) -> None:
        where = os.path.realpath(root) + "\0" + rules_key
        tag = hashlib.sha1(where.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        self._path = Path(cache_dir) / f"stats-{tag}.marshal" if cache_dir is not None else None
        self.known: dict[str, tuple[StatKey, bytes]] = _load(self._path)
        self.seen: dict[str, tuple[StatKey, bytes]] = {}

    def digest(self, path: str, key: StatKey) -> bytes | None:
        hit = self.known.get(path)
        if hit is not None and tuple(hit[0]) == key and isinstance(hit[1], bytes):
            return hit[1]
        return None

    def saw(self, path: str, key: StatKey, digest: bytes, now_ns: int) -> None:
        if now_ns - max(key[1], key[2]) > RACY_NS:
            self.seen[path] = (key, digest)

    def save(self) -> None:
        if self.seen != self.known:
            _save(self._path, self.seen)
