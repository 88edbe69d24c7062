"""The repository snapshot: files -> token budget -> one stable block that opens the prompt.

`build_snapshot(root, tokenizer, SnapshotConfig(budget_tokens=N))` lists the repository's
files (context_files.py), reads the text ones, counts each file's section with the model's
tokenizer (context_tokens.py) and, when everything does not fit, keeps the files the rest of
the repository references most (context_rank.py) and lists the others by path. AGENTS.md (or
CLAUDE.md) at the root goes first, as instructions. The same repository state gives the same
bytes: no time, no absolute path, no machine detail enters the text.

The session puts `Snapshot.message()` right after the system prompt and never rewrites it; a
fresh snapshot is an explicit, reported event (agent/compaction.py). Every request folds the
two into one leading system message (agent/prompt_messages.py): M3's template renders only
the first message as system text, so a second system message would never reach the model.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from m3agent.engine.api import Message

from .context_files import FileRules, SnapshotProgress, list_candidates, read_source
from .context_rank import outline, rank_scores
from .context_select import file_cap, select
from .context_tokens import TokenCounter
from .events import Progress

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")
SNAPSHOT_OPEN = "<repository_snapshot>"
SNAPSHOT_CLOSE = "</repository_snapshot>\n"


@dataclass(frozen=True, slots=True)
class SnapshotConfig:
    budget_tokens: int
    rules: FileRules = field(default_factory=FileRules)
    cache_dir: Path | None = None  # token-count cache; None: count every time

    def __post_init__(self) -> None:
        if self.budget_tokens < 1:
            raise ValueError(f"the context budget must be positive, got {self.budget_tokens}")


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str
    # "included" | "outline" (over the per-file cap: its top-level symbols) | "listed" (over
    # budget: path only) | "skipped" | "instructions"
    status: str
    tokens: int = 0  # of its section (included/outline/instructions) or its path line (listed)
    reason: str = ""  # for skipped / listed
    score: float = 0.0


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
        return {**self.summary(), "files": [asdict(f) for f in self.files]}


def _section(path: str, text: str) -> str:
    body = text if text.endswith("\n") or not text else text + "\n"
    return f'<file path="{path}">\n{body}</file>\n'


def _outline_section(path: str, symbols: str, tokens: int) -> str:
    return (
        f'<file path="{path}" outline="top-level symbols only; the file is {tokens} tokens">\n'
        f"{symbols}</file>\n"
    )


def _instructions(name: str, text: str) -> str:
    body = text if text.endswith("\n") or not text else text + "\n"
    return f'<instructions source="{name}">\n{body}</instructions>\n'


def _header(n_files: int, digest: str) -> str:
    return (
        f"{SNAPSHOT_OPEN}\nThe repository as it was when this snapshot was taken ({n_files} files"
        f", content {digest}). It is not updated: changes since then reach you as tool results."
        "\n"
    )


def _listing(paths: list[str]) -> tuple[str, str]:
    return f'<files_not_shown count="{len(paths)}">\n', "</files_not_shown>\n"


# Sections are counted this many at a time, so that progress can say how far counting got.
_COUNT_CHUNK = 256


def build_snapshot(
    root: Path,
    tokenizer: Any,
    config: SnapshotConfig,
    progress: Callable[[Progress], None] | None = None,
) -> Snapshot:
    """Deterministic for the same files, rules, budget and tokenizer. progress: called with
    Progress events (files listed, read, tokens counted), a few per second at most."""
    started = time.perf_counter()
    root = Path(root)
    counter = TokenCounter(tokenizer, config.cache_dir)
    tally = SnapshotProgress(progress) if progress is not None else None
    candidates, name_skips = list_candidates(root, config.rules, tally)
    entries: list[FileEntry] = [FileEntry(s.path, "skipped", reason=s.reason) for s in name_skips]

    instructions: tuple[str, str] | None = None
    texts: dict[str, str] = {}
    for c in candidates:
        text, why = read_source(root, c.path, config.rules)
        if tally is not None:
            tally.read_file()
        if text is None:
            entries.append(FileEntry(c.path, "skipped", reason=why))
        else:
            texts[c.path] = text
    for name in INSTRUCTION_FILES:  # AGENTS.md wins; CLAUDE.md is the fallback
        if name in texts:
            instructions = (name, texts.pop(name))
            break  # with both present, CLAUDE.md stays an ordinary file

    order = [c.path for c in candidates if c.path in texts]
    sections = [_section(p, texts[p]) for p in order]
    section_tokens: list[int] = []
    for k in range(0, len(sections), _COUNT_CHUNK):
        section_tokens += counter.count(sections[k : k + _COUNT_CHUNK])
        if tally is not None:
            tally.counted(sum(section_tokens[k:]))
    path_tokens = counter.count([p + "\n" for p in order], remember=False) if order else []
    instr_text = _instructions(*instructions) if instructions else ""
    instr_tokens = counter.count([instr_text])[0] if instr_text else 0

    # The header names the content hash, which depends on the selection: count it with a
    # placeholder of the same shape (the hash's digits do not change its length much).
    header_tokens = counter.count([_header(len(order), "sha256:" + "0" * 16)], remember=False)[0]
    close_tokens = counter.count([SNAPSHOT_CLOSE], remember=False)[0]
    open_l, close_l = _listing(order)
    # + the digits of the count and a "(K more not shown)" line, counted generously.
    listing_tokens = sum(counter.count([open_l, close_l], remember=False)) + 16
    fixed = header_tokens + close_tokens + instr_tokens

    total_all = fixed + sum(section_tokens)
    scores: dict[str, float] = {}
    outlines: dict[int, tuple[str, int]] = {}  # files over the per-file cap: (section, tokens)
    if total_all <= config.budget_tokens:
        inc_idx, shown_idx = set(range(len(order))), set[int]()
    else:
        room = config.budget_tokens - fixed - listing_tokens
        cap = file_cap(room)
        # A file too large to include whole competes with its outline (top-level symbols).
        cost = list(section_tokens)
        for i, p in enumerate(order):
            if section_tokens[i] > cap and (symbols := outline(texts[p])):
                sec = _outline_section(p, symbols, section_tokens[i])
                n = counter.count([sec], remember=False)[0]
                if n <= cap:
                    outlines[i] = (sec, n)
                    cost[i] = n
        scores = rank_scores(texts, dict(zip(order, cost, strict=True)))
        ranked = sorted(range(len(order)), key=lambda i: (-scores[order[i]], i))
        inc_idx, shown_idx = select(ranked, cost, path_tokens, room, cap=cap)
        outlines = {i: v for i, v in outlines.items() if i in inc_idx}
        inc_idx -= set(outlines)
    included = {order[i] for i in inc_idx}
    outlined = {order[i] for i in outlines}
    listed = [p for p in order if p not in included and p not in outlined]
    shown = {order[i] for i in shown_idx}

    body_parts: list[str] = [instr_text] if instr_text else []
    body_parts += [s for p, s in zip(order, sections, strict=True) if p in included]
    body_parts += [outlines[i][0] for i in sorted(outlines)]
    if listed:
        open_l, close_l = _listing(listed)
        more = len(listed) - len(shown)
        tail = f"({more} more not shown)\n" if more else ""
        lines = "".join(p + "\n" for p in order if p in shown)
        body_parts.append(open_l + lines + tail + close_l)
    body = "".join(body_parts)
    digest = "sha256:" + hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    text = _header(len(order), digest) + body + SNAPSHOT_CLOSE
    tokens = fixed + sum(section_tokens[i] for i in inc_idx) + sum(n for _, n in outlines.values())
    if listed:
        tokens += listing_tokens + sum(path_tokens[i] for i in shown_idx)

    by_path = {p: i for i, p in enumerate(order)}
    for p in order:
        i = by_path[p]
        if p in included:
            entries.append(FileEntry(p, "included", section_tokens[i], score=scores.get(p, 0.0)))
        elif i in outlines:
            why = f"over the per-file cap ({section_tokens[i]} tokens)"
            entries.append(FileEntry(p, "outline", outlines[i][1], why, scores.get(p, 0.0)))
        else:
            why = "over budget" if p in shown else "over budget (not listed)"
            entries.append(FileEntry(p, "listed", path_tokens[i], why, scores.get(p, 0.0)))
    if instructions:
        entries.append(FileEntry(instructions[0], "instructions", instr_tokens))
    entries.sort(key=lambda e: e.path)
    counter.save()
    if tally is not None:
        tally.done(tokens)
    return Snapshot(
        text=text,
        tokens=tokens,
        budget_tokens=config.budget_tokens,
        content_hash=hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
        files=tuple(entries),
        instructions=instructions[0] if instructions else None,
        build_time_s=time.perf_counter() - started,
        cache_hits=counter.hits,
    )
