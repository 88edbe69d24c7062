"""Which files go in whole, which as outlines, which by path: tokenizing only what is packed.

Every file has an estimate of its section's tokens (its bytes over scan.bytes_per_token: a
figure per kind of file, measured with M3's tokenizer). When the estimates of the whole
repository are within twice the budget, every section is counted exactly and the selection is
exactly the repo-map selection of rank.py and select.py. Beyond that (a repository of hundreds
of MB against a 1M budget), files are ranked with the estimates, the selected ones are counted
exactly, and selection and ranking run again with those counts until every selected file's
count is exact (a few rounds): the snapshot then tokenizes about what it packs (torch's tree:
1.06M tokens counted for 1.02M packed), and its accounting is still the exact sum of the
pieces' counts. A file whose estimate is over the per-file cap is never tokenized whole: it
competes with its outline (the quick line-pattern one's estimate, then, once chosen, the real
outline counted exactly), which says "about N tokens". Every number is a function of the
content alone (never of what a cache held), so the same repository gives the same packing
cold or warm.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .outline import outline, quick_outline
from .rank import file_values, path_weights, scores_of
from .scan import BYTES_PER_TOKEN, Record, bytes_per_token
from .select import file_cap, select
from .tokens import TokenCounter

EXACT_ALL_TOKENS = 300_000  # below this many (estimated) tokens, count everything
_ROUNDS = 8
_COUNT_CHUNK = 256  # sections counted at a time (progress between chunks)


def section(path: str, text: str) -> str:
    body = text if text.endswith("\n") or not text else text + "\n"
    return f'<file path="{path}">\n{body}</file>\n'


def outline_section(path: str, symbols: str, tokens: int, counted: bool = True) -> str:
    size = f"{tokens} tokens" if counted else f"about {tokens} tokens"
    return (
        f'<file path="{path}" outline="top-level symbols only; the file is {size}">\n'
        f"{symbols}</file>\n"
    )


@dataclass(slots=True)
class Packing:
    """What goes into the snapshot, by index into the candidate order: whole (included, with
    its exact tokens in `whole`), as an outline (`outlines`), or by path (`shown`: those that
    fit the listing; the rest are only counted)."""

    included: set[int] = field(default_factory=set)
    outlines: dict[int, tuple[str, int]] = field(default_factory=dict)  # i -> (section, tokens)
    shown: set[int] = field(default_factory=set)  # listed paths that fit the listing
    whole: dict[int, int] = field(default_factory=dict)  # exact section tokens, where counted
    sizes: dict[int, tuple[int, bool]] = field(default_factory=dict)  # outlined: (size, counted)
    scores: dict[str, float] = field(default_factory=dict)


def _estimate(path: str, rec: Record) -> int:
    return int(rec.n_bytes / bytes_per_token(path)) + 1 + len(path) // 3 + 8


class Packer:
    """Packs `order` (candidate paths with records); text_of(path) gives a file's text and
    outline_of(path, text) its outline (both may be cached by the caller)."""

    def __init__(
        self,
        order: Sequence[str],
        records: dict[str, Record],
        counter: TokenCounter,
        text_of: Callable[[str], str],
        outline_of: Callable[[str, Callable[[], str]], str],
        counted: Callable[[int], None] | None = None,
    ) -> None:
        self.order = list(order)
        self.records = records
        self.counter = counter
        self.text_of = text_of
        self.outline_of = outline_of
        self._counted = counted
        self.est = [_estimate(p, records[p]) for p in self.order]
        self.whole: dict[int, int] = {}
        self._outline: dict[int, str] = {}  # symbols text ("" when none)
        self._quick: dict[int, str] = {}
        self._outline_tokens: dict[int, int | None] = {}  # exact tokens of its outline

    def exact_all(self, budget: int) -> bool:
        est = sum(self.est)
        return est <= EXACT_ALL_TOKENS or est <= 2 * budget

    def count_whole(self, idx: Sequence[int]) -> None:
        idx = [i for i in idx if i not in self.whole]
        for k in range(0, len(idx), _COUNT_CHUNK):
            part = idx[k : k + _COUNT_CHUNK]
            secs = [section(self.order[i], self.text_of(self.order[i])) for i in part]
            ns = self.counter.count(secs)
            self.whole.update(zip(part, ns, strict=True))
            if self._counted is not None:
                self._counted(sum(ns))

    def _symbols(self, i: int, fast: bool) -> str:
        """The outline (fast: the quick line-pattern form, for ranking before it is chosen)."""
        cache = self._quick if fast else self._outline
        if i not in cache:
            p = self.order[i]
            if fast:
                cache[i] = quick_outline(self.text_of(p), p)
            else:
                cache[i] = self.outline_of(p, lambda: self.text_of(p))
        return cache[i]

    def size_of(self, i: int) -> tuple[int, bool]:
        """(tokens of the whole file, whether counted: else its estimate, for a file estimated
        over the cap, which is never counted whole)."""
        return (self.whole[i], True) if i in self.whole else (self.est[i], False)

    def _outline_cost(self, i: int) -> int | None:
        """The exact tokens of the file's outline section (`ast` for Python); None when the
        file has no outline."""
        if i not in self._outline_tokens:
            symbols = self._symbols(i, fast=False)
            n = None
            if symbols:
                sec = outline_section(self.order[i], symbols, *self.size_of(i))
                n = self.counter.count([sec], remember=False)[0]
            self._outline_tokens[i] = n
        return self._outline_tokens[i]

    def _cost(self, i: int, cap: int) -> tuple[int, bool]:
        """(tokens it competes with, whether as its outline). A file over the cap, by its
        count or (never counted whole) by its estimate, competes with its outline: the quick
        one's estimate until it is chosen, then the real outline's exact count."""
        t = self.whole.get(i, self.est[i])
        if t <= cap:
            return t, False
        if i in self.whole or i in self._outline_tokens:
            n = self._outline_cost(i)
            return (n, True) if n is not None and n <= cap else (t, False)
        symbols = self._symbols(i, fast=True)
        if not symbols:
            return t, False
        return int(len(symbols.encode()) / BYTES_PER_TOKEN) + 24, True

    def _exact(self, i: int, as_outline: bool) -> bool:
        return i in self._outline_tokens if as_outline else i in self.whole

    def pack(self, room: int, path_tokens: Sequence[int]) -> Packing:
        """Ranked selection within `room` tokens, every selected section counted exactly."""
        cap = file_cap(room)
        values = file_values(self.order, self.records)
        weights = path_weights(self.order, self.records)
        idx = range(len(self.order))
        for round_ in range(_ROUNDS + 1):
            costs = [self._cost(i, cap) for i in idx]
            if round_ == _ROUNDS:  # still estimates: those files do not compete any more
                costs = [
                    (c, o) if self._exact(i, o) else (room + 1, o) for i, (c, o) in enumerate(costs)
                ]
            cost = [c for c, _ in costs]
            sizes = dict(zip(self.order, cost, strict=True))
            scores = scores_of(self.order, self.records, values, sizes, weights)
            ranked = sorted(idx, key=lambda i: (-scores[self.order[i]], i))
            inc, shown = select(ranked, cost, path_tokens, room, cap=cap)
            need = [i for i in ranked if i in inc and not self._exact(i, costs[i][1])]
            if not need:
                break
            self.count_whole([i for i in need if not costs[i][1]])
            for i in need:
                if costs[i][1]:
                    self._outline_cost(i)
        out = Packing(shown=shown, whole=dict(self.whole), scores=scores)
        for i in inc:
            if costs[i][1]:
                sec = outline_section(self.order[i], self._symbols(i, fast=False), *self.size_of(i))
                out.outlines[i] = (sec, cost[i])
                out.sizes[i] = self.size_of(i)
            else:
                out.included.add(i)
        return out


def default_outline(path: str, text: Callable[[], str]) -> str:
    return outline(text(), path)
