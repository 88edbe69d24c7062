"""On CUDA the model dispatches attention and MSA to the Triton kernels; its logits must match
the CPU (plain torch) path. Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.loaders.checkpoint import load_model
from m3agent.engine.native.loaders.tiny import init_tiny

from .gpu_parity import SPEC, SPLITS, chunked_logits, prompt_ids

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return init_tiny(tmp_path_factory.mktemp("gpu"), SPEC)


def test_cuda_float32_matches_cpu(ckpt, paged):
    # float32 on CUDA takes the torch ops (the Triton kernels are built for bf16/fp8 tiles)
    ids = prompt_ids()
    cpu = chunked_logits(load_model(ckpt), ids, paged, "cpu", SPLITS)
    gpu = chunked_logits(load_model(ckpt, device="cuda"), ids, paged, "cuda", SPLITS)
    assert ((gpu - cpu).abs().max() / cpu.abs().max()).item() < 2e-3
    assert (gpu.argmax(-1) == cpu.argmax(-1)).float().mean() > 0.98


def test_bf16_kernels_no_worse_than_bf16_torch_ops(ckpt, paged, monkeypatch):
    """The Triton path against the float32 CPU reference may carry bf16 rounding, but no more
    than the torch ops run in bf16 on the same GPU (measured: 0.33 vs 0.37 max-relative on
    this random model's prefill logits, 0.005 on decode; bench/results/gpu_model_parity_*)."""
    ids = prompt_ids()
    cpu = chunked_logits(load_model(ckpt), ids, paged, "cpu", SPLITS)
    bf16 = {"device": "cuda", "dtype": torch.bfloat16}
    kernels = chunked_logits(load_model(ckpt, **bf16), ids, paged, "cuda", SPLITS)
    monkeypatch.setenv("M3AGENT_TORCH_OPS", "all")  # read when a model is built
    reference = chunked_logits(load_model(ckpt, **bf16), ids, paged, "cuda", SPLITS)

    def rel(x):
        return ((x - cpu).abs().max() / cpu.abs().max()).item()

    assert torch.isfinite(kernels).all()
    assert rel(kernels) <= 1.25 * rel(reference) + 0.02, (rel(kernels), rel(reference))
    agree = (kernels.argmax(-1) == cpu.argmax(-1)).float().mean().item()
    ref_agree = (reference.argmax(-1) == cpu.argmax(-1)).float().mean().item()
    assert agree >= ref_agree - 0.02, (agree, ref_agree)
