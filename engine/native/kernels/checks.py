"""The PROTOCOL's correctness gate, shared by the tests and the benchmarks."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class SelectionCheck:
    rows: int
    mismatched_rows: int  # rows whose sets differ beyond ties
    missing_forced: int
    bad_padding: int

    @property
    def ok(self) -> bool:
        return self.mismatched_rows == 0 and self.missing_forced == 0 and self.bad_padding == 0


def check_selection(
    sel: torch.Tensor,
    ref_sel: torch.Tensor,
    ref_scores: torch.Tensor,
    positions: torch.Tensor,
    tie_tol: float = 1e-3,
) -> SelectionCheck:
    """Sets equal, except a differing block whose reference score is within tie_tol of the
    reference cut-off score (a tie); the own block always chosen; -1 padding exactly
    K - min(K, nvis)."""
    sel, ref_sel = sel.cpu().long(), ref_sel.cpu().long()
    scores = ref_scores.cpu()
    t, h, k = sel.shape
    nvis = positions.cpu().long() // 128 + 1
    bad = missing = badpad = 0
    for i in range(t):
        own = int(nvis[i]) - 1
        want_pad = k - min(k, int(nvis[i]))
        for j in range(h):
            a = set(sel[i, j][sel[i, j] >= 0].tolist())
            b = set(ref_sel[i, j][ref_sel[i, j] >= 0].tolist())
            if own not in a:
                missing += 1
            if int((sel[i, j] < 0).sum()) != want_pad or len(a) != k - want_pad:
                badpad += 1
            if a != b:
                cut = scores[i, j, list(b)].min()
                diff = a.symmetric_difference(b)
                if any(
                    abs(float(scores[i, j, x]) - float(cut)) > tie_tol * max(1.0, abs(float(cut)))
                    for x in diff
                ):
                    bad += 1
    return SelectionCheck(t * h, bad, missing, badpad)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(relative L2 error, cosine similarity) against an fp32 reference."""
    o, r = out.double().flatten(), ref.double().flatten()
    if not torch.isfinite(o).all():
        return float("inf"), 0.0
    rel = float((o - r).norm() / r.norm().clamp_min(1e-30))
    cos = float(torch.dot(o, r) / (o.norm() * r.norm()).clamp_min(1e-30))
    return rel, cos
