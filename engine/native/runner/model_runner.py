"""Runs one scheduled step: the batch's tensors and AttentionMetadata, the model, the sampler.

Logits are computed only for the last token of each row that samples (a prefill chunk that
does not reach the end of its prompt produces none).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch

from ...api import SamplingParams
from ..core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from ..core.model_api import LayerCache, NativeModel
from ..core.scheduler_output import SchedulerOutput
from .sampler import Sampler, seeded_generator

if TYPE_CHECKING:
    from ..models.m3 import M3ForCausalLM
    from .cuda_graphs import DecodeGraphs
    from .mm_inputs import MultiModalInputs, VisionEmbedder


@dataclass(frozen=True, slots=True)
class ModelRunnerOutput:
    sampled_token_ids: dict[str, int]
    # Filled only when the runner keeps logits (tests, debugging): request id -> [vocab] fp32.
    logits: dict[str, torch.Tensor] | None = None


def build_attention_metadata(out: SchedulerOutput, device: torch.device) -> AttentionMetadata:
    positions: list[int] = []
    slots: list[int] = []
    query_start = [0]
    for row in out.scheduled:
        ctx = row.num_computed_tokens
        for pos in range(ctx, ctx + row.num_tokens):
            positions.append(pos)
            slots.append(row.block_ids[pos // BLOCK_SIZE] * BLOCK_SIZE + pos % BLOCK_SIZE)
        query_start.append(query_start[-1] + row.num_tokens)
    max_blocks = max(len(r.block_ids) for r in out.scheduled)
    tables = [list(r.block_ids) + [0] * (max_blocks - len(r.block_ids)) for r in out.scheduled]
    context_lens = tuple(r.num_computed_tokens for r in out.scheduled)
    query_lens = tuple(r.num_tokens for r in out.scheduled)
    seq_lens = tuple(c + q for c, q in zip(context_lens, query_lens, strict=True))

    def i32(values: list[int] | tuple[int, ...]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=device)

    return AttentionMetadata(
        positions=torch.tensor(positions, dtype=torch.int64, device=device),
        slot_mapping=torch.tensor(slots, dtype=torch.int64, device=device),
        query_start_loc=i32(query_start),
        seq_lens=i32(seq_lens),
        context_lens=i32(context_lens),
        block_tables=torch.tensor(tables, dtype=torch.int32, device=device),
        query_lens_cpu=query_lens,
        seq_lens_cpu=seq_lens,
        context_lens_cpu=context_lens,
        num_decodes=out.num_decodes,
        decode_query_len=1,
    )


class ModelRunner:
    def __init__(
        self,
        model: NativeModel,
        caches: list[LayerCache],
        device: torch.device,
        keep_logits: bool = False,
        vision: VisionEmbedder | None = None,  # merges image/video rows into the embeddings
        graphs: DecodeGraphs | None = None,  # replays decode steps (None: always eager)
    ) -> None:
        self.model = model
        self.graphs = graphs
        # Seconds the last step spent blocked on the GPU (reading back the sampled tokens):
        # a step's wall time minus this is its host time.
        self.last_sync_wait_s = 0.0
        self.vision = vision
        self.caches = caches
        self.device = device
        self.keep_logits = keep_logits
        self.sampler = Sampler()
        self._params: dict[str, SamplingParams] = {}
        self._generators: dict[str, torch.Generator | None] = {}

    def add_request(
        self,
        request_id: str,
        params: SamplingParams,
        mm_inputs: MultiModalInputs | None = None,
    ) -> None:
        if mm_inputs is not None:
            assert self.vision is not None, "LLMEngine.add_request refuses media without a tower"
            self.vision.add_request(request_id, mm_inputs)
        self._params[request_id] = params
        self._generators[request_id] = (
            seeded_generator(params.seed, self.device) if params.seed is not None else None
        )

    def remove_request(self, request_id: str) -> None:
        if self.graphs is not None:
            self.graphs.forget(request_id)
        self._params.pop(request_id, None)
        self._generators.pop(request_id, None)
        if self.vision is not None:
            self.vision.remove_request(request_id)

    @torch.inference_mode()
    def execute_model(self, out: SchedulerOutput) -> ModelRunnerOutput:
        if out.is_empty:
            return ModelRunnerOutput({}, {} if self.keep_logits else None)
        if self.graphs is not None and self.graphs.fits(out):
            replayed = self.graphs.run(out)
            if replayed is not None:
                ids = [r.request_id for r in out.scheduled]
                return self._sample(ids, *replayed)
        md = build_attention_metadata(out, self.device)
        input_ids = torch.tensor(
            [t for row in out.scheduled for t in row.token_ids],
            dtype=torch.int64,
            device=self.device,
        )
        if self.vision is not None and self.vision.needs(out):
            m3 = cast("M3ForCausalLM", self.model)  # only M3 checkpoints carry a vision tower
            embeds = self.vision.merge(out, m3.model.embed_tokens(input_ids))
            hidden = m3.forward(input_ids, self.caches, md, inputs_embeds=embeds)
        else:
            hidden = self.model.forward(input_ids, self.caches, md)
        sampling_rows = [i for i, row in enumerate(out.scheduled) if row.samples]
        if not sampling_rows:
            return ModelRunnerOutput({}, {} if self.keep_logits else None)
        ends = torch.tensor(md.query_lens_cpu).cumsum(0) - 1
        last = ends[sampling_rows].tolist()
        logits = self.model.compute_logits(hidden[torch.tensor(last, device=hidden.device)])
        logits = logits.float()
        ids = [out.scheduled[i].request_id for i in sampling_rows]
        return self._sample(ids, logits, None)

    def _sample(
        self, ids: list[str], logits: torch.Tensor, greedy: torch.Tensor | None
    ) -> ModelRunnerOutput:
        params = [self._params[r] for r in ids]
        t = time.perf_counter()
        if greedy is not None and all(p.greedy for p in params):
            tokens = greedy.tolist()  # the graph's own argmax: one small read-back
        else:
            tokens = self.sampler(logits, params, [self._generators[r] for r in ids])
        self.last_sync_wait_s = time.perf_counter() - t
        kept = {r: logits[j].cpu() for j, r in enumerate(ids)} if self.keep_logits else None
        return ModelRunnerOutput(dict(zip(ids, tokens, strict=True)), kept)
