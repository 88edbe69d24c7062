"""The disk tier's folder as files, without torch: listing pages, what each model keeps, clearing.

    <root>/<identity key>/model.json               what the pages are for (identity.describe())
    <root>/<identity key>/pages/<hh>/<hash>.kvp    one page (page_file.py), named by its hash

`m3agent cache` reads it through `summarize` and empties it through `clear`; the disk tier
(disk.py) scans it with `iter_pages` for its LRU eviction.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

PAGE_SUFFIX = ".kvp"
MODEL_FILE = "model.json"


@dataclass(frozen=True, slots=True)
class PageEntry:
    path: Path
    model: str  # the identity key (the folder's name)
    size: int
    mtime: float

    @property
    def name(self) -> str:
        return self.path.name[: -len(PAGE_SUFFIX)]


def iter_pages(root: Path, stale_tmp_s: float | None = None) -> list[PageEntry]:
    """Every page file under root (all models); with stale_tmp_s, deletes temporary files
    older than that on the way (a writer killed mid-write leaves one)."""
    out: list[PageEntry] = []
    now = time.time()
    try:
        models = [m for m in os.scandir(root) if m.is_dir(follow_symlinks=False)]
    except OSError:
        return out
    for model in models:
        pages = Path(model.path) / "pages"
        if pages.is_symlink():  # nothing is followed: eviction deletes what it finds here
            continue
        try:
            shards = [s for s in os.scandir(pages) if s.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for shard in shards:
            try:
                files = list(os.scandir(shard.path))
            except OSError:
                continue
            for f in files:
                try:
                    st = f.stat(follow_symlinks=False)
                except OSError:
                    continue
                if f.name.endswith(PAGE_SUFFIX) and not f.name.startswith("."):
                    out.append(PageEntry(Path(f.path), model.name, st.st_size, st.st_mtime))
                elif stale_tmp_s is not None and f.name.endswith(".tmp"):
                    if now - st.st_mtime > stale_tmp_s:
                        with contextlib.suppress(OSError):
                            os.unlink(f.path)
    return out


@dataclass(frozen=True, slots=True)
class ModelPages:
    """What the folder keeps for one model identity."""

    key: str
    name: str  # the checkpoint folder's name ("?" when model.json is missing or unreadable)
    pages: int
    bytes: int
    last_used: float | None  # the newest page's mtime (reads touch it)
    detail: dict[str, object]  # model.json: dtypes, block size, device, engine version


def summarize(root: Path) -> list[ModelPages]:
    """Per model identity, most recently used first."""
    per: dict[str, list[PageEntry]] = {}
    for e in iter_pages(root):
        per.setdefault(e.model, []).append(e)
    with contextlib.suppress(OSError):
        for m in os.scandir(root):
            if m.is_dir(follow_symlinks=False):
                per.setdefault(m.name, [])
    out = []
    for key, entries in per.items():
        detail: dict[str, object] = {}
        with contextlib.suppress(OSError, ValueError):
            loaded = json.loads((root / key / MODEL_FILE).read_text(encoding="utf-8"))
            if isinstance(loaded, dict):
                detail = loaded
        out.append(
            ModelPages(
                key=key,
                name=str(detail.get("name") or "?"),
                pages=len(entries),
                bytes=sum(e.size for e in entries),
                last_used=max((e.mtime for e in entries), default=None),
                detail=detail,
            )
        )
    return sorted(out, key=lambda m: -(m.last_used or 0.0))


def clear(root: Path, key: str | None = None) -> tuple[int, int]:
    """Deletes every model's pages (or one identity's, by key or a unique key prefix, or the
    model's name); returns (pages, bytes) deleted. ValueError when `key` names nothing."""
    models = summarize(root)
    if key is not None:
        models = [m for m in models if m.key.startswith(key) or m.name == key]
        if not models:
            raise ValueError(f"the KV cache in {root} keeps nothing for {key!r}")
    pages = sum(m.pages for m in models)
    size = sum(m.bytes for m in models)
    for m in models:
        shutil.rmtree(root / m.key, ignore_errors=True)
    return pages, size
