"""Whole decode steps as CUDA graphs: the model forward, the logits and the greedy pick.

A decode step of B requests (one new token each) replays a graph captured for
(padded batch bucket, block-table width bucket). Its inputs live in static device buffers:
token ids, positions and slots in one int64 buffer, query_start_loc, seq/context lengths and
the block table in one int32 buffer, each filled by ONE host-to-device copy from a pinned
staging buffer per step. Padding rows point at the null page with slot -1 (nothing is
written) and their outputs are ignored. The MSA kernels take their launch shapes from the
buckets and everything else from those buffers, so nothing in the graph needs the host.

The width bucket (a power of two of 128-token pages) keeps the indexer's split-K grid sized
to the context actually served instead of to max_model_len.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from ..core.model_api import LayerCache, NativeModel
from ..core.scheduler_output import ScheduledRequest, SchedulerOutput

_BATCH_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
_MIN_WIDTH = 16  # pages: 2K tokens


def _bucket(n: int, buckets: tuple[int, ...]) -> int:
    return next(b for b in buckets if b >= n)


def _pow2_at_least(n: int, lo: int) -> int:
    w = lo
    while w < n:
        w *= 2
    return w


@dataclass(slots=True)
class _Graph:
    graph: torch.cuda.CUDAGraph
    logits: torch.Tensor  # [B, vocab] fp32, rewritten by every replay
    greedy: torch.Tensor  # [B] int64 argmax of logits


class DecodeGraphs:
    def __init__(
        self,
        model: NativeModel,
        caches: list[LayerCache],
        device: torch.device,
        max_batch: int,
        max_model_len: int,
    ) -> None:
        self.model = model
        self.caches = caches
        self.device = device
        self.batch_buckets = tuple(b for b in _BATCH_BUCKETS if b < max_batch) + (
            _bucket(max_batch, _BATCH_BUCKETS + (max_batch,)),
        )
        self.max_batch = self.batch_buckets[-1]
        self.max_width = -(-max_model_len // BLOCK_SIZE)
        b = self.max_batch
        self._n64 = 3 * b
        self._n32 = 3 * b + 1 + b * self.max_width
        self._host64 = torch.zeros(self._n64, dtype=torch.int64, pin_memory=True)
        self._host32 = torch.zeros(self._n32, dtype=torch.int32, pin_memory=True)
        self._np64 = self._host64.numpy()
        self._np32 = self._host32.numpy()
        self._dev64 = torch.zeros(self._n64, dtype=torch.int64, device=device)
        self._dev32 = torch.zeros(self._n32, dtype=torch.int32, device=device)
        self._graphs: dict[tuple[int, int], _Graph] = {}
        self._pool = torch.cuda.graph_pool_handle()
        self._tables: dict[str, np.ndarray] = {}  # request id -> its block ids so far
        self.num_captures = 0
        self.disabled: str | None = None  # why capturing failed: every step then runs eager

    # ---- which steps fit ----------------------------------------------------------------

    def fits(self, out: SchedulerOutput) -> bool:
        rows = out.scheduled
        return (
            self.disabled is None
            and 0 < len(rows) <= self.max_batch
            and out.num_decodes == len(rows)
            and all(r.num_tokens == 1 and r.samples for r in rows)
        )

    def forget(self, request_id: str) -> None:
        self._tables.pop(request_id, None)

    # ---- one step -----------------------------------------------------------------------

    def run(self, out: SchedulerOutput) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Replays the step's graph (capturing it first if new); returns the real rows'
        logits [n, vocab] fp32 and greedy tokens [n] (views of the graph's outputs), or None
        when capturing failed (then `disabled` says why and the caller runs eagerly)."""
        rows = out.scheduled
        n = len(rows)
        for rid in out.new_req_ids:  # (re)admitted: its block table may have changed
            self._tables.pop(rid, None)
        width = _pow2_at_least(max(len(r.block_ids) for r in rows), _MIN_WIDTH)
        key = (_bucket(n, self.batch_buckets), min(width, self.max_width))
        g = self._graphs.get(key)
        if g is None:
            try:
                g = self._graphs[key] = self._capture(*key)
            except RuntimeError as e:  # an op that needs the host (e.g. M3AGENT_TORCH_OPS)
                self.disabled = f"capture of decode graph {key} failed: {e}".splitlines()[0]
                return None
        self._stage(rows, *key)
        g.graph.replay()
        return g.logits[:n], g.greedy[:n]

    def _stage(self, rows: Sequence[ScheduledRequest], b: int, w: int) -> None:
        n = len(rows)
        h64, h32 = self._np64, self._np32
        qsl = h32[: b + 1]
        qsl[:] = np.arange(b + 1, dtype=np.int32)  # one token per row, padding included
        seq, ctx = h32[b + 1 : 2 * b + 1], h32[2 * b + 1 : 3 * b + 1]
        bt = h32[3 * b + 1 : 3 * b + 1 + b * w].reshape(b, w)
        ids, pos, slots = h64[:b], h64[b : 2 * b], h64[2 * b : 3 * b]
        for i, r in enumerate(rows):
            p = r.num_computed_tokens
            ids[i] = r.token_ids[0]
            pos[i] = p
            seq[i], ctx[i] = p + 1, p
            table = self._table(r.request_id, r.block_ids)
            bt[i, : table.shape[0]] = table
            slots[i] = int(table[p // BLOCK_SIZE]) * BLOCK_SIZE + p % BLOCK_SIZE
        # padding rows: position 0 of the null page, nothing written (slot -1)
        ids[n:], pos[n:], slots[n:] = 0, 0, -1
        seq[n:], ctx[n:] = 1, 0
        bt[n:, 0] = 0
        m32 = 3 * b + 1 + b * w
        self._dev64[: 3 * b].copy_(self._host64[: 3 * b], non_blocking=True)
        self._dev32[:m32].copy_(self._host32[:m32], non_blocking=True)

    def _table(self, rid: str, block_ids: tuple[int, ...]) -> np.ndarray:
        """The request's block ids as int32, extended by the pages added since last step (a
        full conversion of a 1M-token table costs ~0.2 ms of host time per row and step)."""
        t = self._tables.get(rid)
        n = len(block_ids)
        if t is None or t.shape[0] > n:
            t = np.asarray(block_ids, dtype=np.int32)
        elif t.shape[0] < n:
            t = np.concatenate([t, np.asarray(block_ids[t.shape[0] :], dtype=np.int32)])
        self._tables[rid] = t
        return t

    # ---- capture ------------------------------------------------------------------------

    def _metadata(self, b: int, w: int) -> AttentionMetadata:
        d64, d32 = self._dev64, self._dev32
        return AttentionMetadata(
            positions=d64[b : 2 * b],
            slot_mapping=d64[2 * b : 3 * b],
            query_start_loc=d32[: b + 1],
            seq_lens=d32[b + 1 : 2 * b + 1],
            context_lens=d32[2 * b + 1 : 3 * b + 1],
            block_tables=d32[3 * b + 1 : 3 * b + 1 + b * w].view(b, w),
            # launch decisions only read query lengths (all 1); the lengths below are
            # placeholders for the reference paths, which a graph never takes
            query_lens_cpu=(1,) * b,
            seq_lens_cpu=(w * BLOCK_SIZE,) * b,
            context_lens_cpu=(w * BLOCK_SIZE - 1,) * b,
            num_decodes=b,
            decode_query_len=1,
        )

    def _forward(self, b: int, md: AttentionMetadata) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.model.forward(self._dev64[:b], self.caches, md)
        logits = self.model.compute_logits(hidden).float()
        return logits, logits.argmax(-1)

    @torch.inference_mode()
    def _capture(self, b: int, w: int) -> _Graph:
        self._stage((), b, w)  # all padding: valid inputs that write nothing
        md = self._metadata(b, w)
        s = torch.cuda.Stream(self.device)
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s):  # compiles the Triton kernels for these shapes
            self._forward(b, md)
        torch.cuda.current_stream(self.device).wait_stream(s)
        torch.cuda.synchronize(self.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits, greedy = self._forward(b, md)
        self.num_captures += 1
        return _Graph(graph, logits, greedy)
