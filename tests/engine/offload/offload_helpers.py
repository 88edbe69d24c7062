"""Checkpoints and engines for the offload tests: a model loaded all on the device whose
routed experts are exactly the host form's dequantised values, and its offloaded twin."""

from __future__ import annotations

from pathlib import Path

import torch
from m3agent.engine.api import SamplingParams
from m3agent.engine.native.core import sampling_params
from m3agent.engine.native.core.engine_config import EngineConfig
from m3agent.engine.native.core.llm_engine import LLMEngine
from m3agent.engine.native.loaders.checkpoint import load_model
from m3agent.engine.offload.config import OffloadConfig
from m3agent.engine.offload.device_experts import dequantised


def greedy(n: int) -> SamplingParams:
    return sampling_params.native_params(max_tokens=n, ignore_eos=True)


def prompt(n: int, seed: int, vocab: int = 250) -> list[int]:
    return torch.randint(3, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def random_expert_weights(experts: int, h: int, inter: int, seed: int, scale: float):
    """Seeded normal weights of one layer's routed experts, times scale: (gate, up, down)
    lists of `experts` tensors shaped (inter, h), (inter, h) and (h, inter)."""
    g = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> list[torch.Tensor]:
        return [torch.randn(*shape, generator=g) * scale for _ in range(experts)]

    return draw(inter, h), draw(inter, h), draw(h, inter)


def offloaded(path: Path, cfg: OffloadConfig, dtype=torch.float32):
    return load_model(path, dtype=dtype, offload=cfg)


def reference_for(path: Path, off_model, dtype=torch.float32):
    """All on the device, routed experts replaced by the host form's dequantised values."""
    ref = load_model(path, dtype=dtype)
    for i, L in off_model.offload.layers.items():
        moe = ref.model.layers[i].block_sparse_moe
        w13, w2 = dequantised(L, dtype)
        with torch.no_grad():
            moe._w13.copy_(w13)
            moe._w2.copy_(w2)
    return ref


def engine(model, **kw) -> LLMEngine:
    return LLMEngine(model, None, EngineConfig(num_gpu_blocks=40, keep_logits=True, **kw))


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).float()


class HostPrecisionExpert(torch.nn.Module):
    """One routed expert on the device with the host form's exact (dequantised, fp32) weights,
    rounding to bf16 where the host kernel does (input, both GEMM outputs, activation)."""

    def __init__(self, w13: torch.Tensor, w2: torch.Tensor, alpha, limit, beta) -> None:
        super().__init__()
        self.w13, self.w2 = w13, w2
        self.act = (alpha, limit, beta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from m3agent.engine.native.layers.mlp import swiglu_oai_merged

        gu = _bf16(_bf16(x) @ self.w13.t())
        a = _bf16(swiglu_oai_merged(gu, *self.act))
        return _bf16(a @ self.w2.t())


def host_precision_reference(path: Path, off_model):
    """The all-on-device engine whose routed experts are the host form's values computed at
    the host path's precision (the dequantised weights rounded to bf16, as the torch CPU path
    and the GPU's hot and streamed experts use them): offloading must then change no greedy
    token."""
    ref = load_model(path, dtype=torch.float32)
    for i, L in off_model.offload.layers.items():
        moe = ref.model.layers[i].block_sparse_moe
        w13, w2 = (w.float() for w in dequantised(L, torch.bfloat16))
        for e in range(L.num_experts):
            moe.experts[e] = HostPrecisionExpert(w13[e], w2[e], moe.alpha, moe.limit, moe.beta)
    return ref
