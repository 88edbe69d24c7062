"""How the routed experts are offloaded: the host form, the GPU's hot-expert slots, prefill
streaming and the CPU kernel (read by the loader, the runtime and `m3agent model plan`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .plan import ExpertForm

# host forms the CPU computes with today; the offload-kernels work adds int4 / MXFP8
HOST_FORMS = (ExpertForm.INT8, ExpertForm.INT4, ExpertForm.MXFP8, ExpertForm.BF16)


@dataclass(frozen=True, slots=True)
class OffloadConfig:
    form: ExpertForm = ExpertForm.INT8  # resolved: never AUTO
    hot_experts_per_layer: int = 0  # GPU slots per MoE layer for hot experts
    prefill_stream_tokens: int = 1024  # chunks this long stream experts to the GPU (0: never)
    stream_experts: int = 32  # experts per streamed transfer (two such GPU buffers)
    cpu_threads: int | None = None  # torch threads for the CPU experts (None: torch's default)
    # The compiled CPU kernel (activations quantised per 32 for the integer forms, as llama.cpp's
    # Q8 path does); False: the torch path, whose rounding the GPU's hot and streamed experts
    # share exactly (device_experts.py), which the token-equality tests need.
    cpu_kernel: bool = True
    # Where converted experts are kept (expert_cache.py): the first start converts them, later
    # starts map the files. None: convert in memory on every load (tests, benchmarks).
    cache_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.form not in HOST_FORMS:
            raise ValueError(
                f"expert form {self.form} is not a host form here "
                f"(use {', '.join(f.value for f in HOST_FORMS)})"
            )
        if self.hot_experts_per_layer < 0:
            raise ValueError("hot experts per layer must be >= 0")
        if self.prefill_stream_tokens < 0:
            raise ValueError("prefill stream threshold must be >= 0 tokens")
        if self.stream_experts < 1:
            raise ValueError("stream experts must be >= 1")
