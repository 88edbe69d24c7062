"""A fake `vllm` 0.33.0 for tests: the slice of its API m3agent uses, with its signatures,
validation, exception types and messages (see tests/engine/backends/vllm/fake_vllm.py)."""

__version__ = "0.33.0"


class _Fake:
    def __init__(self):
        self.engine_args = []  # kwargs of every AsyncEngineArgs
        self.requests = []  # (request_id, prompt dict, SamplingParams) per generate
        self.aborted = []  # request ids passed to abort()
        self.scripts = []  # raw outputs to stream, one per request (FIFO)
        self.load_error = None  # an exception to raise from from_engine_args
        self.core_failure = None  # an exception line the engine core process prints, then dies
        self.generate_error = None  # an exception generate() hits inside (-> EngineGenerateError)
        self.dead = False  # the engine core is gone (EngineDeadError)
        self.finish_reason = "stop"  # how each request ends (vLLM's strings)
        self.chunk = 3  # characters per streamed delta
        self.delay_s = 0.0  # pause between deltas
        self.shutdowns = 0
        self.abort_wakes = True  # False: like an engine that sends no final output on abort
        self.cancelled = []  # request ids whose generate() was cancelled by the caller


FAKE = _Fake()

from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs  # noqa: E402
from vllm.sampling_params import SamplingParams  # noqa: E402

__all__ = ["FAKE", "AsyncEngineArgs", "EngineArgs", "SamplingParams"]
