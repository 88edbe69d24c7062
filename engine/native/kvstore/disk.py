"""The disk tier: KV pages as immutable, content-addressed files under one folder (folder.py).

Writes go through one background thread and a queue bounded in bytes, so a step only copies its
new pages out of the cache; a page that does not fit the queue is not saved (a later request
recomputes it). Each file is written to a unique temporary name, fsynced and renamed: a reader
sees a whole page or none, and two processes writing the same page both write a valid one (the
last rename wins). Nothing is ever modified in place. One page file's reading and writing is
page_io.py; reading a run of pages ahead on a thread, read_ahead.py.

Least recently used eviction keeps the whole folder (every model) under the budget: a read
touches the file's mtime, and the writer, once its running total passes the budget, rescans the
folder and deletes the oldest pages until 90% of it is left. A page deleted under another process
is simply a miss there.

Failures cost speed, never correctness: an unreadable, truncated, corrupt or foreign page is
recomputed (one warning line naming the reason); a full disk drops the page (one line); a
read-only folder turns writing off (one line) and reads still work.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import queue
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from .folder import MODEL_FILE, PAGE_SUFFIX, iter_pages
from .identity import ModelIdentity
from .page_file import PageKey, encode
from .page_io import Loaded, load_page, write_page
from .read_ahead import ReadAhead

log = logging.getLogger(__name__)

DEFAULT_QUEUE_BYTES = 256 << 20
_STALE_TMP_S = 600.0  # a temporary file this old was left by a killed writer
_EVICT_TO = 0.9


@dataclass(slots=True)
class DiskStats:
    saved: int = 0  # pages written by this process
    dropped: int = 0  # pages not saved: queue full, disk full, read-only
    restored: int = 0  # pages read back and used
    rejected: int = 0  # pages found but unusable (recomputed)
    evicted: int = 0  # pages deleted to stay under the budget


@dataclass(frozen=True, slots=True)
class _Job:
    key: PageKey
    tensors: tuple[torch.Tensor, ...]  # host copies, in the page's layout order
    nbytes: int


class DiskTier:
    """Pages of one model identity in `root`; thread-safe (the engine thread reads and
    enqueues, the writer thread writes and evicts, a reader thread reads ahead on request)."""

    def __init__(
        self,
        root: Path,
        identity: ModelIdentity,
        budget_bytes: int,
        payload_bytes: int,
        max_queue_bytes: int = DEFAULT_QUEUE_BYTES,
    ) -> None:
        if budget_bytes <= 0:
            raise ValueError(f"the KV disk cache budget must be positive, got {budget_bytes}")
        self.root = Path(root)
        self.identity = identity
        self.key = identity.key
        self.dir = self.root / self.key
        self._pages = str(self.dir / "pages")
        self.budget_bytes = budget_bytes
        self.payload_bytes = payload_bytes
        self.max_queue_bytes = max_queue_bytes
        self.stats = DiskStats()
        self._lock = threading.Lock()
        self._known: set[str] = set()  # page names this process believes are on disk
        self._queued_bytes = 0
        self._total_bytes = 0  # the whole folder's pages, as of the last scan plus writes
        self._said: set[str] = set()  # failure kinds already logged once
        self._buf = bytearray()  # the read buffer (engine thread only)
        self._ahead: ReadAhead | None = None  # the pages being read ahead (prefetch)
        self.writable = self._prepare()
        self._scan()
        self._queue: queue.Queue[_Job | None] = queue.Queue()
        self._thread = threading.Thread(target=self._writer, name="m3agent-kv-disk", daemon=True)
        self._thread.start()

    # ---- reading (engine thread) -----------------------------------------------------------

    def contains(self, key: PageKey) -> bool:
        """Whether this process believes the page is saved (or queued): no need to save it."""
        return key.name in self._known

    def get(self, key: PageKey) -> memoryview | None:
        """The page's payload when an intact page of this identity names exactly this prefix;
        None otherwise (a missing page quietly, an unusable one with one warning line). The
        payload lives in a buffer a later call reuses: the caller copies it out at once."""
        loaded = self._prefetched(key)
        if loaded is None:
            loaded = self._load(key)
        path = self._file(key.name)
        if loaded.payload is None:
            if loaded.reason is None:
                self._known.discard(key.name)
            else:
                self._reject(key, path, loaded.reason, remove=loaded.remove)
            return None
        with contextlib.suppress(OSError):  # the LRU clock; a read-only folder has none
            os.utime(path)
        self._known.add(key.name)
        self.stats.restored += 1
        return loaded.payload

    def prefetch(self, keys: Sequence[PageKey]) -> None:
        """Reads these pages ahead, in order, on a thread of their own (stopping at the first
        one missing or unusable), so that reading and checking the next page overlaps copying
        this one into the cache; `get` takes them in the same order. Empty: stops it."""
        self._stop_prefetch()
        if len(keys) < 2:
            return
        self._ahead = ReadAhead(keys, lambda key: self._load(key, fresh=True))

    def _prefetched(self, key: PageKey) -> Loaded | None:
        """The next prefetched page when it is this key's; None (and no more prefetching)
        when nothing is prefetched or the caller asks for another page."""
        ahead = self._ahead
        if ahead is None:
            return None
        loaded = ahead.take(key.name)
        if loaded is None:
            self._stop_prefetch()
        return loaded

    def _stop_prefetch(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.stop()

    def _load(self, key: PageKey, fresh: bool = False) -> Loaded:
        """Reads and checks one page: into a buffer of its own when `fresh`, else into the
        engine thread's reused one. Logs nothing (the engine thread does, in `get`)."""
        buffer = bytearray if fresh else self._reused_buffer
        return load_page(self._file(key.name), buffer, self.key, key, self.payload_bytes)

    def _reused_buffer(self, size: int) -> bytearray:
        if len(self._buf) < size:  # one buffer for every read: no zero-fill
            self._buf = bytearray(size)
        return self._buf

    def _reject(self, key: PageKey, path: str, reason: str, remove: bool) -> None:
        self.stats.rejected += 1
        self._known.discard(key.name)
        log.warning("kv disk cache: page %s not used (%s); recomputing", key.name[:16], reason)
        if remove and self.writable:
            with contextlib.suppress(OSError):
                os.unlink(path)

    # ---- writing ---------------------------------------------------------------------------

    def put(self, key: PageKey, tensors: Sequence[torch.Tensor]) -> bool:
        """Queues a page for writing (host tensors the caller no longer touches); False when it
        is not saved (read-only folder, or the queue already holds max_queue_bytes)."""
        if not self.writable:
            return False
        nbytes = sum(t.nbytes for t in tensors)
        with self._lock:
            if self._queued_bytes + nbytes > self.max_queue_bytes:
                self.stats.dropped += 1
                return False
            self._queued_bytes += nbytes
            self._known.add(key.name)
        self._queue.put(_Job(key, tuple(tensors), nbytes))
        return True

    def flush(self) -> None:
        """Waits until every queued page is written (or dropped)."""
        self._queue.join()

    def close(self, timeout_s: float = 60.0) -> None:
        """Writes what is queued (up to timeout_s), then stops the writer."""
        self._stop_prefetch()
        if not self._thread.is_alive():
            return
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _writer(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._write(job)
            finally:
                if job is not None:
                    with self._lock:
                        self._queued_bytes -= job.nbytes
                self._queue.task_done()

    def _write(self, job: _Job) -> None:
        if not self.writable:
            self._known.discard(job.key.name)
            self.stats.dropped += 1
            return
        payload = [t.contiguous().view(torch.uint8).numpy().data for t in job.tensors]
        parts, total = encode(self.key, job.key, payload)
        path = self._path(job.key.name)
        if not self.dir.is_dir():  # `m3agent cache clear` ran meanwhile: model.json again
            self._prepare()
        try:
            write_page(self.dir, path, parts)
        except OSError as e:
            self._known.discard(job.key.name)
            self.stats.dropped += 1
            self._write_failed(e)
            return
        self.stats.saved += 1
        with self._lock:
            self._total_bytes += total
            over = self._total_bytes > self.budget_bytes
        if over:
            self._evict()

    def _write_failed(self, e: OSError) -> None:
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            self.writable = False
            self._say("readonly", f"kv disk cache: {self.dir} is not writable ({e}); not saving")
        elif e.errno in (errno.ENOSPC, errno.EDQUOT):
            self._say(
                "full", f"kv disk cache: disk full ({e}); pages not saved until there is room"
            )
            self._evict()  # our own budget may be above what the disk has left
        else:
            self._say(f"errno{e.errno}", f"kv disk cache: a page was not saved ({e})")

    def _say(self, kind: str, line: str) -> None:
        if kind not in self._said:
            self._said.add(kind)
            log.warning("%s", line)

    # ---- the folder ------------------------------------------------------------------------

    def _path(self, name: str) -> Path:
        return Path(self._file(name))

    def _file(self, name: str) -> str:
        return os.path.join(self._pages, name[:2], name + PAGE_SUFFIX)  # no Path: per page

    def _prepare(self) -> bool:
        """Creates the model's folder and model.json; False (one line) when it cannot."""
        try:
            # private: a page is checked against corruption, not against a forger
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.dir.mkdir(mode=0o700, exist_ok=True)
            target = self.dir / MODEL_FILE
            if not target.exists():
                tmp = target.with_name(f".{MODEL_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(json.dumps(self.identity.describe(), indent=1))
                os.replace(tmp, target)
            probe = self.dir / f".probe.{os.getpid()}.{secrets.token_hex(4)}"
            probe.touch()
            probe.unlink()
        except OSError as e:
            log.warning("kv disk cache: %s is not writable (%s); reading only", self.dir, e)
            return False
        return True

    def _scan(self) -> None:
        """Learns this model's pages and the folder's size; removes a killed writer's leftovers."""
        own, total = set(), 0
        for entry in iter_pages(self.root, stale_tmp_s=_STALE_TMP_S if self.writable else None):
            total += entry.size
            if entry.model == self.key:
                own.add(entry.name)
        with self._lock:
            self._known |= own
            self._total_bytes = total

    def _evict(self) -> None:
        """Deletes least recently used pages (any model) until 90% of the budget is left."""
        entries = sorted(iter_pages(self.root), key=lambda e: e.mtime)
        total = sum(e.size for e in entries)
        target = int(self.budget_bytes * _EVICT_TO)
        for e in entries:
            if total <= target:
                break
            try:
                e.path.unlink()
            except FileNotFoundError:
                pass  # another process evicted it first
            except OSError:
                continue
            total -= e.size
            self.stats.evicted += 1
            if e.model == self.key:
                self._known.discard(e.name)
        with self._lock:
            self._total_bytes = total
