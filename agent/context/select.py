"""Which files get their full text and which only their path, for a given room in tokens.

No single file may take more than a share of the room (FILE_SHARE, 10% by default, never
less than MIN_FILE_CAP tokens): one huge
test or data file must not crowd out the many files an agent needs. Larger files are left to
the listing (the snapshot can show their outline instead). Then two passes. First, the
best-ranked files take their sections while a share of the room stays reserved for the
listing of the others (so that a repository of 10,000 files still shows source, not only
paths). Then, if every remaining path fits, sections are swapped in for path lines, best
first, as long as the total stays in the room (small files fill the gaps); otherwise the
listing keeps the best-ranked paths that fit.
"""

from __future__ import annotations

from collections.abc import Sequence

LISTING_SHARE = 0.1  # at most this much of the budget is reserved for paths of omitted files
FILE_SHARE = 0.1  # no file's section may take more than this much of the room...
MIN_FILE_CAP = 2048  # ...but a file this small is never too large (small budgets, tests)


def file_cap(room: int, share: float = FILE_SHARE) -> int:
    return max(MIN_FILE_CAP, int(room * share))


def select(
    ranked: Sequence[int],
    section_tokens: Sequence[int],
    path_tokens: Sequence[int],
    room: int,
    *,
    cap: int | None = None,
) -> tuple[set[int], set[int]]:
    """(included, listed) file indices; `ranked` is every index, best first.

    cap: the largest section one file may have (default: FILE_SHARE of the room)."""
    limit = file_cap(room) if cap is None else cap
    fits = [t <= limit for t in section_tokens]
    reserve = min(sum(path_tokens), int(room * LISTING_SHARE))
    left = room - reserve
    included: set[int] = set()
    for i in ranked:
        if fits[i] and section_tokens[i] <= left:
            included.add(i)
            left -= section_tokens[i]
    rest = [i for i in ranked if i not in included]
    used = sum(section_tokens[i] for i in included)
    cost = used + sum(path_tokens[i] for i in rest)
    if cost <= room:
        for i in rest:
            delta = section_tokens[i] - path_tokens[i]
            if fits[i] and cost + delta <= room:
                included.add(i)
                cost += delta
        return included, {i for i in ranked if i not in included}
    left = room - used
    listed: set[int] = set()
    for i in rest:
        if path_tokens[i] <= left:
            listed.add(i)
            left -= path_tokens[i]
    return included, listed
