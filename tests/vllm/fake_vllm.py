"""A fake `vllm` package, written into a temp dir that the tests put on sys.path.

It is a real importable package with the slice of vLLM's API the backend uses
(AsyncEngineArgs, SamplingParams, sampling_params.RequestOutputKind, v1.engine.async_llm.AsyncLLM
with from_engine_args / generate / abort / shutdown). It records every engine argument, prompt
and sampling parameter, streams scripted raw M3 text in small delta chunks, counts cached
prompt tokens with a real block-wise prefix match over earlier prompts, and can fail loading
with a chosen message (set `vllm.FAKE.load_error`).
"""

from __future__ import annotations

import sys
from pathlib import Path

INIT = '''
__version__ = "0.33.0"

class _Fake:
    def __init__(self):
        self.engine_args = []      # kwargs of every AsyncEngineArgs
        self.requests = []         # (request_id, prompt dict, SamplingParams) per generate
        self.aborted = []          # request ids passed to abort()
        self.scripts = []          # raw outputs to stream, one per request (FIFO)
        self.load_error = None     # an exception to raise from from_engine_args
        self.chunk = 3             # characters per streamed delta
        self.delay_s = 0.0         # pause between deltas
        self.shutdowns = 0
        self.abort_wakes = True    # False: like an engine that sends no final output on abort
        self.cancelled = []        # request ids whose generate() was cancelled by the caller

FAKE = _Fake()

class AsyncEngineArgs:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        FAKE.engine_args.append(kwargs)

from vllm.sampling_params import SamplingParams  # noqa: E402
from vllm import sampling_params  # noqa: E402
'''

SAMPLING = '''
import enum

class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2

class SamplingParams:
    def __init__(self, max_tokens=16, temperature=1.0, top_p=1.0, top_k=0, seed=None,
                 stop=None, skip_special_tokens=True, output_kind=RequestOutputKind.CUMULATIVE):
        if temperature < 0:
            raise ValueError("temperature must be non-negative")
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.seed = seed
        self.stop = stop
        self.skip_special_tokens = skip_special_tokens
        self.output_kind = output_kind
'''

ASYNC_LLM = '''
import asyncio
from dataclasses import dataclass, field

from vllm import FAKE
from vllm.sampling_params import RequestOutputKind

BLOCK = 128

@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list
    finish_reason: str | None = None

@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list | None
    outputs: list
    finished: bool
    num_cached_tokens: int | None = None

class AsyncLLM:
    def __init__(self, args):
        self.args = args
        self._seen = []          # token lists of earlier prompts (the "prefix cache")
        self._abort = set()

    @classmethod
    def from_engine_args(cls, engine_args):
        if FAKE.load_error is not None:
            raise FAKE.load_error
        return cls(engine_args.kwargs)

    def _cached(self, ids):
        best = 0
        for old in self._seen:
            n = 0
            for a, b in zip(old, ids):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        # whole blocks only, and never the last token (it must be computed)
        return min(best, len(ids) - 1) // BLOCK * BLOCK

    async def generate(self, prompt, sampling_params, request_id):
        if "prompt_token_ids" in prompt:
            ids = list(prompt["prompt_token_ids"])
        else:
            ids = [ord(c) for c in prompt["prompt"]]
        max_len = self.args["max_model_len"]
        if len(ids) > max_len:
            raise ValueError(f"The decoder prompt (length {len(ids)}) is longer than the "
                             f"maximum model length of {max_len}.")
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
                yield RequestOutput(request_id, None, [CompletionOutput(0, "", [], "abort")],
                                    True, None)
                return
            piece = text[sent:sent + FAKE.chunk]
            sent += len(piece)
            done = sent >= len(text)
            out_text = piece if delta else text[:sent]
            yield RequestOutput(
                request_id, ids if first or not delta else None,
                [CompletionOutput(0, out_text, [0] * len(piece), "stop" if done else None)],
                done, cached)
            first = False

    async def abort(self, request_id):
        FAKE.aborted.append(request_id)
        self._abort.add(request_id)

    def shutdown(self):
        FAKE.shutdowns += 1
'''


def install(root: Path) -> None:
    """Writes the package under root/vllm and makes it importable (fresh each time)."""
    pkg = root / "vllm"
    (pkg / "v1" / "engine").mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(INIT)
    (pkg / "sampling_params.py").write_text(SAMPLING)
    (pkg / "v1" / "__init__.py").write_text("")
    (pkg / "v1" / "engine" / "__init__.py").write_text("")
    (pkg / "v1" / "engine" / "async_llm.py").write_text(ASYNC_LLM)
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))


def uninstall(root: Path) -> None:
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]
    if str(root) in sys.path:
        sys.path.remove(str(root))
