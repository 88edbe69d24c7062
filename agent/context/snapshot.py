"""The repository snapshot: files -> token budget -> one stable block that opens the prompt.

`build_snapshot(root, tokenizer, SnapshotConfig(budget_tokens=N))` lists the repository's
files (files.py), reads and hashes each one and scans the new ones (collect.py, scan.py),
and, when everything does not fit, keeps the files the rest of the repository references most
(packing.py over rank.py and select.py), counting exactly with the model's tokenizer what it packs
(tokens.py); the others are listed by path. AGENTS.md (or CLAUDE.md) at the root goes first, as
instructions. The same repository state gives the same bytes: no time, no absolute path, no
machine detail enters the text. A warm start on an unchanged repository finds its whole outcome
in the store (store.py) and only stats its files (store.StatIndex) and reads what it packs.

The session puts `Snapshot.message()` right after the system prompt and never rewrites it; a
fresh snapshot is an explicit, reported event (agent/compaction.py). Every request folds the
two into one leading system message (agent/prompt_messages.py): M3's template renders only
the first message as system text, so a second system message would never reach the model.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from m3agent.engine.api import Message

from ..events import Progress
from .collect import ReadPass, bytes_of, read_all, records_for
from .files import FileRules, list_candidates
from .outcome import SNAPSHOT_CLOSE, FileEntry, from_plain, pack_snapshot, to_plain
from .outline import outline
from .packing import section
from .progress import SnapshotProgress
from .store import VERSION, SnapshotStore, StatIndex
from .tokens import TokenCounter

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")
SNAPSHOT_OPEN = "<repository_snapshot>"


@dataclass(frozen=True, slots=True)
class SnapshotConfig:
    budget_tokens: int
    rules: FileRules = field(default_factory=FileRules)
    cache_dir: Path | None = None  # token counts, records and outcomes; None: nothing kept

    def __post_init__(self) -> None:
        if self.budget_tokens < 1:
            raise ValueError(f"the context budget must be positive, got {self.budget_tokens}")


@dataclass(frozen=True, slots=True)
class Snapshot:
    text: str
    tokens: int  # counted with the model's tokenizer (sum of the pieces' counts)
    budget_tokens: int
    content_hash: str  # sha256 of `text`
    files: tuple[FileEntry, ...]
    instructions: str | None  # the instruction file used, if any
    build_time_s: float
    cache_hits: int = 0

    def entries(self, status: str) -> list[FileEntry]:
        return [f for f in self.files if f.status == status]

    def message(self) -> Message:
        return Message(role="system", content=self.text)

    def summary(self) -> dict[str, Any]:
        """The figures a ContextEvent and `m3agent context` report."""
        return {
            "tokens": self.tokens,
            "budget_tokens": self.budget_tokens,
            "content_hash": self.content_hash,
            "files_included": len(self.entries("included")),
            "files_outlined": len(self.entries("outline")),
            "files_listed": len(self.entries("listed")),
            "files_skipped": len(self.entries("skipped")),
            "instructions": self.instructions,
            "build_time_s": round(self.build_time_s, 4),
        }

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "files": [f.as_dict() for f in self.files]}


def _instructions(name: str, text: str) -> str:
    body = text if text.endswith("\n") or not text else text + "\n"
    return f'<instructions source="{name}">\n{body}</instructions>\n'


def _header(n_files: int, digest_: str) -> str:
    return (
        f"{SNAPSHOT_OPEN}\nThe repository as it was when this snapshot was taken ({n_files} files"
        f", content {digest_}). It is not updated: changes since then reach you as tool results."
        "\n"
    )


def _listing(paths: list[str]) -> tuple[str, str]:
    return f'<files_not_shown count="{len(paths)}">\n', "</files_not_shown>\n"


class _Changed(Exception):
    """A file changed between its scan and its packing: the build starts over."""


def _rules_key(rules: FileRules) -> str:
    return repr((VERSION, rules.use_builtin_rules, rules.max_file_bytes))


class _Texts:
    """A candidate's text: the bytes that were hashed (a file edited since restarts the build).
    Outlines are cached in the store by content hash."""

    def __init__(self, root: Path, rules: FileRules, got: ReadPass, store: SnapshotStore) -> None:
        self._root, self._rules, self._got, self._store = root, rules, got, store

    def __call__(self, path: str) -> str:
        data = bytes_of(self._root, self._got, path, self._rules)
        if data is None:
            raise _Changed(path)
        return data.decode("utf-8")

    def outline(self, path: str, text: Callable[[], str]) -> str:
        key = self._got.digests[path] + b"/outline"
        cached = self._store.record(key)
        if isinstance(cached, tuple) and len(cached) == 1 and isinstance(cached[0], str):
            return cached[0]
        symbols = outline(text(), path)
        self._store.put_record(key, (symbols,))
        return symbols


def build_snapshot(
    root: Path,
    tokenizer: Any,
    config: SnapshotConfig,
    progress: Callable[[Progress], None] | None = None,
) -> Snapshot:
    """Deterministic for the same files, rules, budget and tokenizer. progress: called with
    Progress events (files listed, read, tokens counted), a few per second at most."""
    for attempt in range(2):
        try:
            return _build(Path(root), tokenizer, config, progress, trust_stat=attempt == 0)
        except _Changed:
            continue  # edited while we read it: once more, from the listing, reading it all
    return _build(Path(root), tokenizer, config, progress, trust_stat=False)


def _build(
    root: Path,
    tokenizer: Any,
    config: SnapshotConfig,
    progress: Callable[[Progress], None] | None,
    trust_stat: bool,
) -> Snapshot:
    started = time.perf_counter()
    counter = TokenCounter(tokenizer, config.cache_dir)
    tally = SnapshotProgress(progress) if progress is not None else None
    candidates, name_skips = list_candidates(root, config.rules, tally)
    rules_key = _rules_key(config.rules)
    store = SnapshotStore(config.cache_dir, rules_key)
    stats = StatIndex(config.cache_dir, root, rules_key) if config.cache_dir is not None else None
    if stats is not None and not trust_stat:
        stats.known = {}
    got = read_all(root, candidates, config.rules, tally, stats)
    text_of = _Texts(root, config.rules, got, store)
    entries: list[FileEntry] = [FileEntry(s.path, "skipped", reason=s.reason) for s in name_skips]
    state = hashlib.sha1(
        repr((VERSION, config.budget_tokens, config.rules, counter.fingerprint)).encode()
    )
    for c in candidates:
        mark = got.digests.get(c.path) or got.failed[c.path].encode()
        state.update(c.path.encode("utf-8", "surrogateescape") + b"\0" + mark + b"\0")
    key = state.digest()
    outcome = from_plain(store.outcome(key))
    if outcome is None:
        records = records_for(root, [c.path for c in candidates], got, config.rules, store)
        if records is None:
            raise _Changed("a file")
        skips = [(c.path, records[c.path].reason) for c in candidates if records[c.path].reason]
        texts_ok = [c.path for c in candidates if not records[c.path].reason]
        instructions = next((n for n in INSTRUCTION_FILES if n in texts_ok), None)
        order = [p for p in texts_ok if p != instructions]  # with both, CLAUDE.md is a file
        instr_text = _instructions(instructions, text_of(instructions)) if instructions else ""
        outcome = pack_snapshot(
            order, {p: records[p] for p in order}, counter, text_of, text_of.outline,
            (instr_text, instructions) if instructions else None,
            config.budget_tokens, tally, _header, _listing,
        )  # fmt: skip
        outcome.skips, outcome.instructions = skips, instructions
        store.put_outcome(key, to_plain(outcome))
    store.save()
    counter.save()
    instructions = outcome.instructions
    order = [e.path for e in outcome.entries]
    entries += [FileEntry(p, "skipped", reason=why) for p, why in outcome.skips]
    instr_text = _instructions(instructions, text_of(instructions)) if instructions else ""
    included = {order[i] for i in outcome.packing.included}
    listed = [
        p
        for i, p in enumerate(order)
        if i not in outcome.packing.included and i not in outcome.packing.outlines
    ]
    body_parts: list[str] = [instr_text] if instr_text else []
    body_parts += [section(p, text_of(p)) for p in order if p in included]
    body_parts += [outcome.packing.outlines[i][0] for i in sorted(outcome.packing.outlines)]
    if listed:
        open_l, close_l = _listing(listed)
        more = len(listed) - len(outcome.packing.shown)
        tail = f"({more} more not shown)\n" if more else ""
        lines = "".join(order[i] + "\n" for i in sorted(outcome.packing.shown))
        body_parts.append(open_l + lines + tail + close_l)
    body = "".join(body_parts)
    digest_ = "sha256:" + hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    text = _header(len(order), digest_) + body + SNAPSHOT_CLOSE

    if stats is not None:  # every packed file was read and matched its hash: keep the stats
        stats.save()
    entries += outcome.entries
    if instructions:
        entries.append(FileEntry(instructions, "instructions", outcome.instr_tokens))
    entries.sort(key=lambda e: e.path)
    if tally is not None:
        tally.done(outcome.tokens)
    return Snapshot(
        text=text,
        tokens=outcome.tokens,
        budget_tokens=config.budget_tokens,
        content_hash=hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
        files=tuple(entries),
        instructions=instructions,
        build_time_s=time.perf_counter() - started,
        cache_hits=counter.hits,
    )
