"""The outcome of a build: every candidate's entry, the packing and the token accounting.

`pack_snapshot` does the accounting around packing.Packer (the header, the instructions, the
listing of omitted paths, each counted with the tokenizer); `to_plain`/`from_plain` turn the
outcome into plain data for store.py, so a warm start on the same state skips all of it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .packing import Packer, Packing, section
from .progress import SnapshotProgress
from .scan import Record
from .tokens import TokenCounter

SNAPSHOT_CLOSE = "</repository_snapshot>\n"


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str
    # "included" | "outline" (over the per-file cap: its top-level symbols) | "listed" (over
    # budget: path only) | "skipped" | "instructions"
    status: str
    tokens: int = 0  # of its section (included/outline/instructions) or its path line (listed)
    reason: str = ""  # for skipped / listed
    score: float = 0.0

    def as_dict(self) -> dict[str, str | int | float]:
        """dataclasses.asdict's result, without its recursive copy (30,000 entries)."""
        return {"path": self.path, "status": self.status, "tokens": self.tokens,
                "reason": self.reason, "score": self.score}  # fmt: skip


@dataclass(slots=True)
class Outcome:
    packing: Packing
    entries: list[FileEntry] = field(default_factory=list)
    tokens: int = 0
    instr_tokens: int = 0
    skips: list[tuple[str, str]] = field(default_factory=list)  # skipped for their content
    instructions: str | None = None


def pack_snapshot(
    order: list[str],
    records: dict[str, Record],
    counter: TokenCounter,
    text_of: Callable[[str], str],
    outline_of: Callable[[str, Callable[[], str]], str],
    instructions: tuple[str, str] | None,
    budget: int,
    tally: SnapshotProgress | None,
    header: Callable[[int, str], str],
    listing: Callable[[list[str]], tuple[str, str]],
) -> Outcome:
    """instructions: (its block of text, name) or None."""
    counted = tally.counted if tally is not None else None
    packer = Packer(order, records, counter, text_of, outline_of, counted)
    path_tokens = counter.count([p + "\n" for p in order]) if order else []
    instr_tokens = counter.count([instructions[0]])[0] if instructions else 0
    # The header names the content hash, which depends on the selection: count it with a
    # placeholder of the same shape (the hash's digits do not change its length much).
    header_tokens = counter.count([header(len(order), "sha256:" + "0" * 16)], remember=False)[0]
    close_tokens = counter.count([SNAPSHOT_CLOSE], remember=False)[0]
    open_l, close_l = listing(order)
    # + the digits of the count and a "(K more not shown)" line, counted generously.
    listing_tokens = sum(counter.count([open_l, close_l], remember=False)) + 16
    fixed = header_tokens + close_tokens + instr_tokens
    n = len(order)
    everything = packer.exact_all(budget)
    if everything:
        packer.count_whole(range(n))
    if everything and fixed + sum(packer.whole.values()) <= budget:
        packing = Packing(included=set(range(n)), whole=dict(packer.whole))
    else:
        packing = packer.pack(budget - fixed - listing_tokens, path_tokens)
    tokens = fixed + sum(packing.whole[i] for i in packing.included)
    tokens += sum(t for _, t in packing.outlines.values())
    listed = n - len(packing.included) - len(packing.outlines)
    if listed:
        tokens += listing_tokens + sum(path_tokens[i] for i in packing.shown)
    entries = []
    for i, p in enumerate(order):
        score = packing.scores.get(p, 0.0)
        if i in packing.included:
            entries.append(FileEntry(p, "included", packing.whole[i], score=score))
        elif i in packing.outlines:
            size, exact = packing.sizes[i]
            why = f"over the per-file cap ({'' if exact else 'about '}{size} tokens)"
            entries.append(FileEntry(p, "outline", packing.outlines[i][1], why, score))
        else:
            why = "over budget" if i in packing.shown else "over budget (not listed)"
            entries.append(FileEntry(p, "listed", path_tokens[i], why, score))
    return Outcome(packing, entries, tokens, instr_tokens)


# to_plain's shape: included, outlines, shown, entries, tokens, instr_tokens, skips, instructions
PlainOutcome = tuple[
    list[int],
    dict[int, list[str | int]],
    list[int],
    list[tuple[str, str, int, str, float]],
    int,
    int,
    list[tuple[str, str]],
    str,
]


def to_plain(o: Outcome) -> PlainOutcome:
    p = o.packing
    return (
        sorted(p.included),
        {i: list(v) for i, v in p.outlines.items()},
        sorted(p.shown),
        [(e.path, e.status, e.tokens, e.reason, e.score) for e in o.entries],
        o.tokens,
        o.instr_tokens,
        o.skips,
        o.instructions or "",
    )


def from_plain(t: object) -> Outcome | None:
    """None for anything that is not an outcome (a stale or foreign cache entry)."""
    if not isinstance(t, tuple):
        return None
    try:
        included, outlines, shown, entries, tokens, instr_tokens, skips, instructions = t
        packing = Packing(
            included=set(included),
            outlines={int(i): (str(v[0]), int(v[1])) for i, v in outlines.items()},
            shown=set(shown),
        )
        out = Outcome(packing, [FileEntry(*e) for e in entries], int(tokens), int(instr_tokens))
        out.skips = [(str(p), str(w)) for p, w in skips]
        out.instructions = str(instructions) or None
    except (TypeError, ValueError):
        return None
    return out


__all__ = ["FileEntry", "Outcome", "from_plain", "pack_snapshot", "section", "to_plain"]
