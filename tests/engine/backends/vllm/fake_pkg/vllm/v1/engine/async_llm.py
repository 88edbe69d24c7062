"""vLLM 0.33.0's AsyncLLM as m3agent meets it: from_engine_args / generate / abort / shutdown
with the real signatures; input validation as vLLM's input processor does it (after each media
placeholder has grown into its tokens), errors as vLLM raises them (VLLMValidationError out of
generate(), EngineGenerateError with the cause chained, EngineDeadError), finish reasons from
FAKE.finish_reason. A load failure in the engine core is a real child process that prints its
traceback and dies, then the frontend's generic RuntimeError, as with the multiprocess core."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm import FAKE
from vllm.exceptions import VLLMClientError, VLLMValidationError
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.exceptions import EngineDeadError, EngineGenerateError

BLOCK = 128
IMAGE, VIDEO = "]<]image[>[", "]<]video[>["
_CORE = """
import sys, traceback
line = sys.argv[1]
name, _, msg = line.partition(": ")
print("(EngineCore_DP0 pid=1) INFO [core.py:90] Initializing a V1 LLM engine", flush=True)
try:
    raise type(name.rsplit(".", 1)[-1], (Exception,), {})(msg)
except Exception:
    for tb_line in traceback.format_exc().splitlines()[:-1]:
        print("(EngineCore_DP0 pid=1) ERROR [core.py:1584] " + tb_line)
    print("(EngineCore_DP0 pid=1) ERROR [core.py:1584] " + line, flush=True)
sys.exit(1)
"""


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list
    cumulative_logprob: float | None = None
    logprobs: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list | None
    prompt_logprobs: Any
    outputs: list
    finished: bool
    num_cached_tokens: int | None = None


def _media_ids(tokenizer_dir: str) -> dict[str, int]:
    data = json.loads((Path(tokenizer_dir) / "tokenizer.json").read_text())
    return {
        t["content"]: t["id"]
        for t in data.get("added_tokens", [])
        if t["content"] in (IMAGE, VIDEO)
    }


def _tokens(kind: str, item: Any) -> int:
    """Tokens M3's processor makes of one item (28-px merged patches, start/end wrappers)."""
    if kind == "image":
        w, h = item.size
        return (w // 28) * (h // 28) + 2
    frames = item[0]
    groups = math.ceil(frames.shape[0] / 2)
    return groups * ((frames.shape[1] // 28) * (frames.shape[2] // 28) + 2)


class AsyncLLM:
    def __init__(self, args: Any, log_stats: bool):
        self.args = args
        self.log_stats = log_stats
        self._seen = []  # token lists of earlier prompts (the "prefix cache")
        self._abort = set()
        self._media = _media_ids(args.tokenizer or args.model)

    @classmethod
    def from_engine_args(
        cls, engine_args, start_engine_loop=True, usage_context=None, stat_loggers=None
    ):
        if FAKE.load_error is not None:
            raise FAKE.load_error
        if FAKE.core_failure is not None:
            proc = subprocess.run([sys.executable, "-c", _CORE, FAKE.core_failure])
            raise RuntimeError(
                "Engine core initialization failed. See root cause above. "
                f"Failed core proc(s): {{'EngineCore_DP0': {proc.returncode}}}"
            )
        return cls(engine_args, log_stats=not engine_args.disable_log_stats)

    def _cached(self, ids):
        best = 0
        for old in self._seen:
            n = 0
            for a, b in zip(old, ids, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        # whole blocks only, and never the last token (it must be computed)
        return min(best, len(ids) - 1) // BLOCK * BLOCK

    def _process_inputs(self, prompt: dict) -> list:
        """What vLLM's InputProcessor checks: placeholders against items, the length after
        expansion against max_model_len (prompt + at least one output token)."""
        if "prompt_token_ids" in prompt:
            ids = list(prompt["prompt_token_ids"])
        else:
            ids = [ord(c) for c in prompt["prompt"]]
        length = len(ids)
        mm = prompt.get("multi_modal_data") or {}
        for kind, token in (("image", IMAGE), ("video", VIDEO)):
            items = mm.get(kind)
            if items is None:
                continue
            is_one = (
                kind == "image"
                and hasattr(items, "size")
                or kind == "video"
                and (isinstance(items, tuple))
            )
            items = [items] if is_one else list(items)
            found = ids.count(self._media[token])
            if found != len(items):
                raise VLLMValidationError(
                    f"Expected there to be {len(items)} prompt updates corresponding to "
                    f"{len(items)} {kind} items, but instead found {found} prompt updates! "
                    "This is likely because you forgot to include input placeholder tokens "
                    "(e.g., `<image>`, `<|image_pad|>`) in the prompt."
                )
            length += sum(_tokens(kind, it) - 1 for it in items)
        max_len = self.args.max_model_len
        if length == 0:
            raise VLLMValidationError("The decoder prompt cannot be empty")
        if length > max_len:
            raise VLLMValidationError(
                f"The decoder prompt (length {length}) is longer than the maximum model "
                f"length of {max_len}. Make sure that `max_model_len` is no smaller than the "
                "number of text tokens plus multimodal tokens. For image inputs, the number of "
                "image tokens depends on the number of images, and possibly their aspect "
                "ratios as well."
            )
        if length == max_len:
            raise VLLMValidationError(
                f"The decoder prompt (length {length}) plus the number of requested output "
                f"tokens (at least 1) is longer than the maximum model length of {max_len}. "
                "Make sure that `max_model_len` is no smaller than the number of text tokens "
                "(prompt + requested output tokens)."
            )
        return ids

    async def generate(
        self,
        prompt,
        sampling_params,
        request_id,
        *,
        prompt_text=None,
        lora_request=None,
        tokenization_kwargs=None,
        trace_headers=None,
        priority=0,
        data_parallel_rank=None,
        session_id=None,
        kv_hints=None,
        reasoning_ended=None,
        reasoning_parser_kwargs=None,
    ):
        if FAKE.dead:
            raise EngineDeadError()
        try:
            ids = self._process_inputs(prompt)
            if FAKE.generate_error is not None:
                raise FAKE.generate_error
        except (VLLMClientError, asyncio.CancelledError):
            raise
        except Exception as e:  # vLLM's generate(): anything else is an EngineGenerateError
            raise EngineGenerateError() from e
        FAKE.requests.append((request_id, prompt, sampling_params))
        cached = self._cached(ids)
        self._seen.append(ids)
        text = FAKE.scripts.pop(0) if FAKE.scripts else "</mm:think>ok"
        delta = sampling_params.output_kind == RequestOutputKind.DELTA
        sent = 0
        first = True
        while sent < len(text):
            try:
                await asyncio.sleep(FAKE.delay_s)
            except asyncio.CancelledError:
                FAKE.cancelled.append(request_id)
                raise
            if request_id in self._abort and FAKE.abort_wakes:
                yield RequestOutput(
                    request_id,
                    None,
                    None,
                    None,
                    [CompletionOutput(0, "", [], finish_reason="abort")],
                    True,
                )
                return
            piece = text[sent : sent + FAKE.chunk]
            sent += len(piece)
            done = sent >= len(text)
            out_text = piece if delta else text[:sent]
            reason = FAKE.finish_reason if done else None
            yield RequestOutput(
                request_id,
                None,
                ids if first or not delta else None,
                None,
                [CompletionOutput(0, out_text, [0] * len(piece), finish_reason=reason)],
                done,
                cached,
            )
            first = False

    async def abort(self, request_id, internal=False):
        FAKE.aborted.append(request_id)
        self._abort.add(request_id)

    def shutdown(self, timeout=None):
        FAKE.shutdowns += 1
