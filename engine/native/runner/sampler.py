"""Turns the last-token logits of each sampling request into one token id each.

Greedy rows take the argmax; the others go through temperature, top-k and top-p and then draw
from their own torch.Generator when the request has a seed, so a seeded request gives the same
tokens whatever else shares its batch.
"""

from __future__ import annotations

import torch

from ...api import SamplingParams


def seeded_generator(seed: int, device: torch.device | str) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


def apply_top_k_top_p(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Masks a 1-D row of (temperature-scaled) logits to -inf outside top-k and top-p."""
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        # Keep a token while the mass before it is below top_p (the first is always kept).
        mass_before = probs.cumsum(-1) - probs
        drop_sorted = mass_before >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


class Sampler:
    def __call__(
        self,
        logits: torch.Tensor,  # [N, vocab] float32
        params: list[SamplingParams],
        generators: list[torch.Generator | None],
    ) -> list[int]:
        if logits.shape[0] != len(params):
            raise ValueError(f"{logits.shape[0]} logit rows for {len(params)} requests")
        greedy = logits.argmax(-1).tolist()
        out: list[int] = []
        for row, p, gen in zip(logits, params, generators, strict=True):
            if p.greedy:
                out.append(greedy[len(out)])
                continue
            scaled = apply_top_k_top_p(row.float() / p.temperature, p.top_k, p.top_p)
            probs = scaled.softmax(-1)
            out.append(int(torch.multinomial(probs, 1, generator=gen).item()))
        return out
