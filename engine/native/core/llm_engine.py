"""The token-level engine: requests in, one scheduled step at a time, RequestOutputs out.

Single-threaded by design: the Engine backend runs `step()` on its own thread and talks to it
through queues, so nothing here locks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from ...api import EngineRequestError, FinishReason, PromptTooLong, SamplingParams
from ..runner.model_runner import ModelRunner
from .attention_metadata import BLOCK_SIZE
from .cache_setup import WeightsId, set_up_caches
from .detokenizer import IncrementalDetokenizer, TokenizerLike
from .engine_config import EngineConfig
from .kv_cache_manager import KVCacheManager
from .model_api import NativeModel
from .outputs import PrefillStep, RequestMetrics, RequestOutput
from .request import Request, RequestStatus
from .sampling_params import GREEDY, sampling_error
from .scheduler import Scheduler, SchedulerConfig
from .scheduler_output import SchedulerOutput
from .stop_strings import StopStringFilter

if TYPE_CHECKING:
    from ..runner.mm_inputs import MultiModalInputs

_FINISH: dict[RequestStatus, FinishReason] = {
    RequestStatus.FINISHED_STOPPED: FinishReason.STOP,
    RequestStatus.FINISHED_LENGTH: FinishReason.LENGTH,
    RequestStatus.FINISHED_ABORTED: FinishReason.ABORT,
}


log = logging.getLogger(__name__)


@dataclass(slots=True)
class _TextState:
    detok: IncrementalDetokenizer | None
    stops: StopStringFilter
    text: str = ""
    logits: list[torch.Tensor] = field(default_factory=list)


class LLMEngine:
    def __init__(
        self,
        model: NativeModel,
        tokenizer: TokenizerLike | None = None,
        config: EngineConfig | None = None,
        vision_tower: torch.nn.Module | None = None,  # vision.M3VisionTower of a VL checkpoint
        weights: WeightsId | None = None,  # the checkpoint's identity: needed by the disk tier
    ) -> None:
        self.config = config = config or EngineConfig()
        self.model = model
        self.tokenizer = tokenizer
        self.device = torch.device(config.device)
        model_max = model.info.max_position_embeddings
        wanted_len = min(config.max_model_len or model_max, model_max)
        self.cache_dtype = config.cache_dtype(model.info.dtype)
        setup = set_up_caches(config, model, self.device, wanted_len, weights)
        self.num_blocks, caches = setup.num_blocks, setup.caches
        self.host_kv, self.host_tier_reason = setup.host_kv, setup.host_tier_reason
        self.page_tiers = setup.page_tiers
        # A request must always fit alone, or preemption could never make room for it.
        self.max_model_len = min(wanted_len, (self.num_blocks - 1) * BLOCK_SIZE)
        if self.max_model_len < 2:
            raise ValueError(f"the KV cache of {self.num_blocks} blocks holds no request")
        self.kv_cache_manager = KVCacheManager(
            self.num_blocks, BLOCK_SIZE, config.enable_prefix_caching, tiers=self.page_tiers
        )
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_num_batched_tokens=config.max_num_batched_tokens,
                max_num_seqs=config.max_num_seqs,
                max_model_len=self.max_model_len,
                enable_chunked_prefill=config.enable_chunked_prefill,
            ),
            self.kv_cache_manager,
        )
        vision = None
        if vision_tower is not None:
            from ..runner.mm_inputs import VisionEmbedder

            vision = VisionEmbedder(vision_tower, self.device)
        graphs = None
        if (
            self.device.type == "cuda"
            and model.info.cuda_graphs
            and vision is None
            and model.info.dtype in (torch.bfloat16, torch.float16)  # the kernels' dtypes
            and not config.enforce_eager
            and self.host_kv is None  # a host-tier step fetches blocks from the host
        ):
            from ..runner.cuda_graphs import DecodeGraphs

            graphs = DecodeGraphs(
                model,
                caches,
                self.device,
                min(config.max_graph_batch, config.max_num_seqs),
                self.max_model_len,
            )
        self.runner = ModelRunner(
            model,
            caches,
            self.device,
            keep_logits=config.keep_logits,
            vision=vision,
            graphs=graphs,
        )
        self.offload = model.offload  # refreshed between requests (add_request)
        self._since_refresh = 0
        self._text: dict[str, _TextState] = {}
        self.kept_logits: dict[str, list[torch.Tensor]] = {}  # filled when keep_logits
        self.num_steps = 0
        # The prompts the last step computed a part of: the backend reports their progress.
        self.prefill_steps: tuple[PrefillStep, ...] = ()

    def close(self) -> None:
        """Writes the pages still queued for the lower tiers (the engine is done with)."""
        if self.page_tiers is not None:
            self.page_tiers.close()

    # ---- requests -----------------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        params: SamplingParams | None = None,
        mm_inputs: MultiModalInputs | None = None,  # for a prompt with images/videos
    ) -> None:
        """Queues a request; raises PromptTooLong / EngineRequestError and changes nothing."""
        if mm_inputs is not None and self.runner.vision is None:
            raise EngineRequestError("this model has no vision tower: images/videos unsupported")
        params = params or GREEDY
        why = sampling_error(params)
        if why is not None:
            raise EngineRequestError(f"bad sampling parameters: {why}")
        if not prompt_token_ids:
            raise EngineRequestError(f"request {request_id!r} has an empty prompt")
        if len(prompt_token_ids) >= self.max_model_len:
            raise PromptTooLong(len(prompt_token_ids), self.max_model_len - 1)
        vocab = self.model.info.vocab_size
        bad = next((t for t in prompt_token_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise EngineRequestError(
                f"prompt token id {bad} is outside the vocabulary (0..{vocab - 1})"
            )
        if params.stop and self.tokenizer is None:
            raise EngineRequestError("stop strings need a tokenizer; this engine has none")
        if request_id in self.scheduler.requests:
            raise EngineRequestError(f"request id {request_id!r} is already running")
        request = Request(
            request_id=request_id,
            prompt_token_ids=list(prompt_token_ids),
            sampling_params=params,
            eos_token_ids=() if params.ignore_eos else tuple(self.model.info.eos_token_ids),
            mm_inputs=mm_inputs,
        )
        detok = (
            IncrementalDetokenizer(self.tokenizer, request.prompt_token_ids)
            if self.tokenizer
            else None
        )
        if self.offload is not None:
            # hot experts from the routing counts so far: when idle, and every 16th request
            # under steady load (between two steps: no step reads the slots meanwhile)
            self._since_refresh += 1
            if not self.scheduler.has_unfinished_requests() or self._since_refresh >= 16:
                self.offload.between_requests()
                self._since_refresh = 0
        self.scheduler.add_request(request)
        self.runner.add_request(request_id, params, mm_inputs)
        self._text[request_id] = _TextState(detok, StopStringFilter(params.stop))

    def abort(self, request_id: str) -> RequestOutput | None:
        request = self.scheduler.finish_request(request_id, RequestStatus.FINISHED_ABORTED)
        if request is None:
            return None
        return self._finish_output(request, (), "")

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    # ---- one step -----------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        self.prefill_steps = ()
        sched = self.scheduler.schedule()
        if sched.is_empty:
            return []
        self.num_steps += 1
        try:
            result = self.runner.execute_model(sched)
        except Exception as e:  # a model failure ends the requests it touched, not the engine
            return self._fail(sched.num_scheduled_tokens, e)
        if result.logits is not None:
            for rid, row in result.logits.items():
                self.kept_logits.setdefault(rid, []).append(row)
        outputs = []
        for request in self.scheduler.update_from_output(sched, result.sampled_token_ids):
            outputs.append(self._process_token(request))
        self.prefill_steps = self._prefill_steps(sched)
        return outputs

    def _prefill_steps(self, sched: SchedulerOutput) -> tuple[PrefillStep, ...]:
        now = time.monotonic()
        steps = []
        for row in sched.scheduled:
            request = self.scheduler.requests.get(row.request_id)
            if request is None or row.num_computed_tokens >= request.num_prompt_tokens:
                continue  # a decode (or a finished request): no prompt computed
            started = request.timings.first_scheduled or request.timings.arrival
            steps.append(
                PrefillStep(
                    request.request_id,
                    min(request.num_computed_tokens, request.num_prompt_tokens),
                    request.num_prompt_tokens,
                    max(request.num_cached_tokens, 0),
                    now - started,
                )
            )
        return tuple(steps)

    def _process_token(self, request: Request) -> RequestOutput:
        token = request.output_token_ids[-1]
        params = request.sampling_params
        state = self._text[request.request_id]
        status = None
        if token in request.eos_token_ids or token in params.stop_token_ids:
            status, request.stop_reason = RequestStatus.FINISHED_STOPPED, token
        new_text = ""
        if state.detok is not None and status is None:  # stop tokens never reach the text
            new_text = state.stops.feed(state.detok.add_tokens([token]))
            if state.stops.matched is not None:
                status, request.stop_reason = RequestStatus.FINISHED_STOPPED, state.stops.matched
        if status is None and (
            request.num_output_tokens >= params.max_tokens
            or request.num_tokens >= self.max_model_len
        ):
            status = RequestStatus.FINISHED_LENGTH
        if status is None:
            state.text += new_text
            return self._output(request, (token,), new_text, finished=False, reason=None)
        if state.detok is not None and state.stops.matched is None:
            # The end: release what the detokenizer and the stop-string look-ahead held back.
            new_text += state.stops.feed(state.detok.flush())
            if state.stops.matched is not None:
                status, request.stop_reason = RequestStatus.FINISHED_STOPPED, state.stops.matched
            new_text += state.stops.flush()
        self.scheduler.finish_request(request.request_id, status)
        return self._finish_output(request, (token,), new_text)

    def _finish_output(
        self, request: Request, new_ids: tuple[int, ...], new_text: str
    ) -> RequestOutput:
        state = self._text.pop(request.request_id)
        state.text += new_text
        self.runner.remove_request(request.request_id)
        return self._output(
            request, new_ids, new_text, True, _FINISH[request.status], text=state.text
        )

    def _output(
        self,
        request: Request,
        new_ids: tuple[int, ...],
        new_text: str,
        finished: bool,
        reason: FinishReason | None,
        text: str | None = None,
        error: str | None = None,
    ) -> RequestOutput:
        t = request.timings
        cached = max(request.num_cached_tokens, 0)
        host = cached - request.num_restored_tokens if self.host_kv is not None else 0
        if text is None:
            text = self._text[request.request_id].text
        return RequestOutput(
            request_id=request.request_id,
            new_token_ids=new_ids,
            new_text=new_text,
            token_ids=tuple(request.output_token_ids),
            text=text,
            finished=finished,
            finish_reason=reason,
            stop_reason=request.stop_reason,
            num_prompt_tokens=request.num_prompt_tokens,
            num_cached_tokens=cached,
            num_restored_tokens=request.num_restored_tokens,
            num_host_tokens=host,
            metrics=RequestMetrics(t.arrival, t.first_scheduled, t.first_token, t.finished),
            error=error,
        )

    def _fail(self, scheduled: dict[str, int], exc: Exception) -> list[RequestOutput]:
        message = f"the model failed: {type(exc).__name__}: {exc}".splitlines()[0]
        outs = []
        for rid in scheduled:
            request = self.scheduler.finish_request(rid, RequestStatus.FINISHED_ABORTED)
            if request is None:
                continue
            state = self._text.pop(rid)
            self.runner.remove_request(rid)
            outs.append(
                self._output(
                    request, (), "", True, FinishReason.ERROR, text=state.text, error=message
                )
            )
        return outs

    # ---- convenience --------------------------------------------------------------------

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Runs the prompts together to completion; results in prompt order."""
        if params is None or isinstance(params, SamplingParams):
            params = [params or GREEDY] * len(prompts)
        ids = [f"gen-{time.monotonic_ns()}-{i}" for i in range(len(prompts))]
        for rid, prompt, p in zip(ids, prompts, params, strict=True):
            self.add_request(rid, prompt, p)
        final: dict[str, RequestOutput] = {}
        while len(final) < len(ids):
            for out in self.step():
                if out.finished:
                    final[out.request_id] = out
        return [final[rid] for rid in ids]
