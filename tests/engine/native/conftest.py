"""A tiny paged-attention model for the runtime tests (test code, not part of the package).

Two decoder layers with rotary embeddings and grouped-query attention read and write the paged
caches exactly as AttentionMetadata describes; layer 1 also owns an index-key cache whose keys
bias its attention scores, so a prefix hit that lost the index keys would change the logits.
"""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from m3agent.engine.native.core.model_api import LayerCache, LayerCacheSpec, ModelInfo


def _rope(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    freqs = 1.0 / (1000.0 ** (torch.arange(half, dtype=torch.float64) / half))
    ang = (positions.double()[:, None] * freqs[None, :]).to(x.dtype)
    cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class TinyPagedModel:
    def __init__(
        self,
        vocab: int = 96,
        hidden: int = 32,
        heads: int = 4,
        kv_heads: int = 2,
        head_dim: int = 8,
        index_dim: int = 4,
        max_len: int = 4096,
        eos: tuple[int, ...] = (1,),
        seed: int = 0,
    ) -> None:
        g = torch.Generator().manual_seed(seed)

        def w(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g) / shape[-1] ** 0.5

        self.info = ModelInfo("tiny", vocab, max_len, eos, torch.float32)
        self.h, self.hkv, self.d, self.di = heads, kv_heads, head_dim, index_dim
        self.embed = torch.randn(vocab, hidden, generator=g)
        self.layers = [
            {
                "q": w(heads * head_dim, hidden),
                "k": w(kv_heads * head_dim, hidden),
                "v": w(kv_heads * head_dim, hidden),
                "o": w(hidden, heads * head_dim),
                "up": w(2 * hidden, hidden),
                "down": w(hidden, 2 * hidden),
                "iq": w(index_dim, hidden) if i == 1 else None,
                "ik": w(index_dim, hidden) if i == 1 else None,
            }
            for i in range(2)
        ]
        self.lm_head = w(vocab, hidden) * 4
        self.forward_calls = 0
        self.tokens_computed = 0
        self.offload = None  # NativeModel: no experts in host memory

    def cache_specs(self) -> list[LayerCacheSpec]:
        return [
            LayerCacheSpec(self.hkv, self.d, self.di if p["ik"] is not None else 0)
            for p in self.layers
        ]

    def forward(
        self, input_ids: torch.Tensor, caches: list[LayerCache], md: AttentionMetadata
    ) -> torch.Tensor:
        self.forward_calls += 1
        self.tokens_computed += int(input_ids.shape[0])
        x = self.embed[input_ids]
        for p, cache in zip(self.layers, caches, strict=True):
            x = x + self._attention(torch.nn.functional.rms_norm(x, (x.shape[-1],)), p, cache, md)
            y = torch.nn.functional.rms_norm(x, (x.shape[-1],))
            x = x + torch.nn.functional.silu(y @ p["up"].T) @ p["down"].T
        return torch.nn.functional.rms_norm(x, (x.shape[-1],))

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return (hidden @ self.lm_head.T).float()

    def _attention(self, x, p, cache: LayerCache, md: AttentionMetadata) -> torch.Tensor:
        t = x.shape[0]
        q = _rope((x @ p["q"].T).view(t, self.h, self.d), md.positions)
        k = _rope((x @ p["k"].T).view(t, self.hkv, self.d), md.positions)
        v = (x @ p["v"].T).view(t, self.hkv, self.d)
        blk, off = md.slot_mapping // BLOCK_SIZE, md.slot_mapping % BLOCK_SIZE
        cache.kv[blk, :, off, : self.d] = k
        cache.kv[blk, :, off, self.d :] = v
        iq = None
        if cache.index is not None:
            cache.index[blk, off] = x @ p["ik"].T
            iq = x @ p["iq"].T
        out = torch.empty(t, self.h, self.d)
        q_start = 0
        for r, (ql, sl, cl) in enumerate(
            zip(md.query_lens_cpu, md.seq_lens_cpu, md.context_lens_cpu, strict=True)
        ):
            pages = md.block_tables[r, : -(-sl // BLOCK_SIZE)].long()
            kv = cache.kv[pages].permute(0, 2, 1, 3).reshape(-1, self.hkv, 2 * self.d)[:sl]
            ks = kv[..., : self.d].repeat_interleave(self.h // self.hkv, dim=1)
            vs = kv[..., self.d :].repeat_interleave(self.h // self.hkv, dim=1)
            qs = q[q_start : q_start + ql]
            scores = torch.einsum("qhd,khd->hqk", qs, ks) / self.d**0.5
            if iq is not None:
                keys = cache.index[pages].reshape(-1, self.di)[:sl]
                scores = scores + 0.5 * (iq[q_start : q_start + ql] @ keys.T)[None]
            qpos = torch.arange(cl, cl + ql)[:, None]
            scores = scores.masked_fill(torch.arange(sl)[None, :] > qpos, float("-inf"))
            out[q_start : q_start + ql] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vs)
            q_start += ql
        return out.reshape(t, -1) @ p["o"].T


class CharTokenizer:
    """Bytes as ids 2..: id 0 pads, 1 is end of sequence. Decodes UTF-8 like a byte-level BPE."""

    def encode(self, text: str) -> list[int]:
        return [b + 2 for b in text.encode()]

    def decode(self, token_ids: list[int]) -> str:
        return bytes(t - 2 for t in token_ids if t >= 2).decode("utf-8", errors="replace")


@pytest.fixture
def tiny_model() -> TinyPagedModel:
    return TinyPagedModel()


@pytest.fixture
def char_tokenizer() -> CharTokenizer:
    return CharTokenizer()


@pytest.fixture
def make_model():
    return TinyPagedModel
