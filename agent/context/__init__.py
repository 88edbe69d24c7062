"""The repository snapshot: files -> token budget -> one stable block that opens the prompt.

snapshot.py builds it; files.py lists the candidates and their name-based skips, guard.py
refuses what must never be read, collect.py and scan.py read, hash and scan each file once,
store.py keeps records and outcomes across runs, packing.py, rank.py and select.py choose what is
packed, outline.py maps files over the per-file cap, tokens.py counts with the model's
tokenizer, progress.py reports how far it got.
"""

from .files import FileRules
from .outcome import FileEntry
from .snapshot import SNAPSHOT_OPEN, Snapshot, SnapshotConfig, build_snapshot

__all__ = [
    "SNAPSHOT_OPEN",
    "FileEntry",
    "FileRules",
    "Snapshot",
    "SnapshotConfig",
    "build_snapshot",
]
