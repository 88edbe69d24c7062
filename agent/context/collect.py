"""Every candidate read once and hashed; its Record from the cache, or scanned.

`read_all` reads (through the guards, directories kept open between files) and hashes each
candidate: the floor any snapshot pays. On a warm start (store.StatIndex) a file whose
size, mtime, ctime, inode and device are those the last run saw keeps that run's hash without
being read; the files that are packed (or scanned) are read anyway, through the guards, and
checked against it, and a mismatch restarts the build with every file read. `records_for`
then gives each readable file its Record: from the store when the content is known, else
scanned (scan.py), in worker processes when there is enough of it to pay for starting them.
Records come back in the candidates' order whatever the workers' timing, so the result never
depends on it.
"""

from __future__ import annotations

import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from .files import Candidate, FileRules, read_bytes
from .guard import BeneathReader, Refused, unsafe_rel
from .progress import SnapshotProgress
from .scan import Record, digest
from .scan_pool import Scanner
from .store import SnapshotStore, StatIndex, stat_key

# File bytes kept in memory between the read and the scan or the assembly; beyond it, files
# are read again (and their hash checked) when needed.
KEEP_BYTES = 128 * 2**20


@dataclass(slots=True)
class ReadPass:
    digests: dict[str, bytes] = field(default_factory=dict)  # path -> sha1 of its bytes
    failed: dict[str, str] = field(default_factory=dict)  # path -> why it was not read
    kept: dict[str, bytes] = field(default_factory=dict)  # path -> bytes, while under KEEP_BYTES
    scanned: int = 0  # records computed this run (the others came from the cache)


def read_all(
    root: Path,
    candidates: list[Candidate],
    rules: FileRules,
    tally: SnapshotProgress | None,
    stats: StatIndex | None = None,
) -> ReadPass:
    """Reads and hashes every candidate; with `stats`, a regular file whose stat key is the
    one the last run saw keeps that run's hash unread (its bytes are read later only if it is
    packed or scanned, and checked against the hash then)."""
    out = ReadPass()
    kept_bytes = 0
    reader = BeneathReader(root)
    now_ns = time.time_ns()
    try:
        for c in sorted(candidates, key=lambda c: c.path):  # directories in a row stay open
            key = None
            if stats is not None and not unsafe_rel(c.path):
                try:
                    st = reader.stat(c.path)
                except (OSError, Refused):
                    st = None  # read_bytes below says why
                if (
                    st is not None
                    and stat.S_ISREG(st.st_mode)
                    and st.st_nlink == 1
                    and st.st_size <= rules.max_file_bytes
                ):
                    key = stat_key(st)
                    known = stats.digest(c.path, key)
                    if known is not None:
                        out.digests[c.path] = known
                        stats.saw(c.path, key, known, now_ns)
                        if tally is not None:
                            tally.read_file(st.st_size)
                        continue
            data, why = read_bytes(root, c.path, rules, reader)
            if tally is not None:
                tally.read_file(len(data) if data is not None else 0)
            if data is None:
                out.failed[c.path] = why
                continue
            out.digests[c.path] = d = digest(data)
            if stats is not None and key is not None and len(data) == key[0]:
                stats.saw(c.path, key, d, now_ns)
            if kept_bytes + len(data) <= KEEP_BYTES:
                out.kept[c.path] = data
                kept_bytes += len(data)
    finally:
        reader.close()
    return out


def bytes_of(root: Path, got: ReadPass, path: str, rules: FileRules) -> bytes | None:
    """The bytes that were hashed, or None when the file has changed since."""
    data = got.kept.get(path)
    if data is None:
        data, _ = read_bytes(root, path, rules)
        if data is None or digest(data) != got.digests.get(path):
            return None
    return data


def records_for(
    root: Path, paths: list[str], got: ReadPass, rules: FileRules, store: SnapshotStore
) -> dict[str, Record] | None:
    """path -> Record for the readable `paths`; None when a file changed since read_all."""
    out: dict[str, Record] = {}
    scanner = Scanner(rules)
    for p in paths:
        if p in got.failed:
            out[p] = Record(got.failed[p], 0)
            continue
        plain = store.record(got.digests[p])
        if plain is not None:
            out[p] = Record.from_plain(plain)
            continue
        data = bytes_of(root, got, p, rules)
        if data is None:
            scanner.close()
            return None
        scanner.add(p, data)
        got.scanned += 1
    for p, plain in scanner.results():
        out[p] = Record.from_plain(plain)
        store.put_record(got.digests[p], plain)
    return out
