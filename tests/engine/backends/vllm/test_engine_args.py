"""The arguments VllmEngine gives vLLM, as recorded by the fake vllm package."""

from __future__ import annotations

import pytest
from m3agent.engine.api import EngineUnavailable
from m3agent.engine.backends.vllm import VllmEngine
from m3agent.engine.backends.vllm_args import GpuInfo, VllmOptions

GB = 10**9

H200 = 141 * GB


def h200(n: int) -> GpuInfo:
    return GpuInfo(count=n, memory_bytes=H200, capability=(9, 0), name="H200")


def load(path, gpus, **opts):
    return VllmEngine.from_model_dir(path, VllmOptions(**opts), gpus=gpus)


def test_one_gpu_dev_model(vllm, checkpoint):
    path = checkpoint("dev", weight_bytes=2 * GB, vision=False)
    engine = load(path, h200(1))
    args = vllm.engine_args[-1]
    assert args["model"] == str(path)
    assert args["tensor_parallel_size"] == 1
    assert args["enable_expert_parallel"] is False
    assert args["block_size"] == 128
    assert args["enable_prefix_caching"] is True and args["enable_chunked_prefill"] is True
    assert args["max_model_len"] == 262_144
    assert args["kv_cache_dtype"] == "auto"
    assert "speculative_config" not in args and "limit_mm_per_prompt" not in args
    assert engine.info().backend == "vllm" and engine.info().max_context_tokens == 262_144


def test_fp8_m3_on_four_gpus(vllm, checkpoint):
    path = checkpoint("fp8", weight_bytes=430 * GB, fp8=True)
    load(path, h200(4), kv_cache_dtype="fp8", max_images=8, max_videos=2)
    args = vllm.engine_args[-1]
    assert args["tensor_parallel_size"] == 4
    assert args["enable_expert_parallel"] is True
    assert args["kv_cache_dtype"] == "fp8"
    assert args["limit_mm_per_prompt"] == {"image": 8, "video": 2}
    assert args["mm_encoder_tp_mode"] == "data"


def test_bf16_m3_needs_eight_gpus(vllm, checkpoint):
    path = checkpoint("bf16", weight_bytes=854 * GB)
    with pytest.raises(EngineUnavailable, match=r"need 8 GPUs .*4 visible"):
        load(path, h200(4))
    assert vllm.engine_args == []  # refused before vLLM was asked to load anything
    load(
        path,
        h200(8),
        speculative_draft="Inferact/MiniMax-M3-EAGLE3",
        max_images=0,
        max_videos=0,
        indexer_kv_dtype="fp8",
    )
    args = vllm.engine_args[-1]
    assert args["tensor_parallel_size"] == 8 and args["enable_expert_parallel"] is True
    assert args["speculative_config"] == {
        "method": "eagle3",
        "model": "Inferact/MiniMax-M3-EAGLE3",
        "num_speculative_tokens": 3,
        "attention_backend": "FLASH_ATTN",
    }
    assert args["language_model_only"] is True  # no media: skip the vision tower
    assert args["attention_config"] == {"indexer_kv_dtype": "fp8"}


def test_fp8_m3_on_eight_gpus_uses_all(vllm, checkpoint):
    load(checkpoint("fp8", weight_bytes=430 * GB, fp8=True), h200(8))
    assert vllm.engine_args[-1]["tensor_parallel_size"] == 8


def test_explicit_tp_too_small_is_refused(vllm, checkpoint):
    path = checkpoint("fp8", weight_bytes=430 * GB, fp8=True)
    with pytest.raises(EngineUnavailable, match="too small"):
        load(path, h200(8), tensor_parallel_size=2)


def test_rope_scaling_past_524288_is_capped_and_said(vllm, checkpoint):
    path = checkpoint(
        "yarn",
        weight_bytes=430 * GB,
        fp8=True,
        rope_scaling={
            "rope_type": "yarn",
            "factor": 2.0,
            "original_max_position_embeddings": 524288,
        },
    )
    engine = load(path, h200(8), max_model_len=1_048_576)
    assert vllm.engine_args[-1]["max_model_len"] == 524_288
    notes = " ".join(engine.plan.notes)
    assert "ignores rope_scaling" in notes and "524,288" in notes
    # ROCm honours rope_scaling: the full 1M window is allowed there.
    rocm = GpuInfo(count=8, memory_bytes=192 * GB, capability=(9, 4), name="MI300X", rocm=True)
    load(path, rocm, max_model_len=1_048_576)
    assert vllm.engine_args[-1]["max_model_len"] == 1_048_576


def test_fp8_on_an_old_gpu_is_a_clear_error(vllm, checkpoint):
    a100 = GpuInfo(count=8, memory_bytes=80 * GB, capability=(8, 0), name="A100")
    with pytest.raises(EngineUnavailable, match=r"compute capability 8.9.*A100 is 8.0"):
        load(checkpoint("fp8", weight_bytes=430 * GB, fp8=True), a100)


def test_no_gpu_is_a_clear_error(vllm, checkpoint):
    with pytest.raises(EngineUnavailable, match="needs a CUDA GPU"):
        load(checkpoint(weight_bytes=GB), GpuInfo(count=0, memory_bytes=0))


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), "out of GPU memory"),
        (
            ValueError(
                "To serve at least one request with the models's max seq len (524288), "
                "(30.0 GiB KV cache is needed, which is larger than the available KV cache "
                "memory"
            ),
            "not enough GPU memory for a KV cache of 262,144 tokens",
        ),
        (
            RuntimeError("CUDA error: no kernel image is available for execution on the device"),
            "this GPU cannot run",
        ),
        (ValueError("Model architectures ['Foo'] are not supported for now."), "cannot load"),
        (KeyError("boom"), "vLLM failed to load"),
    ],
)
def test_load_failures_are_one_clear_line(vllm, checkpoint, error, expected):
    vllm.load_error = error
    with pytest.raises(EngineUnavailable) as info:
        load(checkpoint(weight_bytes=GB, vision=False), h200(1))
    message = str(info.value)
    assert expected in message and "\n" not in message


def test_incomplete_checkpoint_is_named(vllm, checkpoint):
    path = checkpoint("half", weight_bytes=4 * GB, missing_shards=2)
    with pytest.raises(EngineUnavailable, match=r"half is incomplete: 2 of 4 weight shards"):
        load(path, h200(1))


def test_without_vllm_installed_the_error_says_so(checkpoint, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    with pytest.raises(EngineUnavailable, match="needs vLLM"):
        load(checkpoint(weight_bytes=GB), h200(1))


def test_bad_options_are_value_errors():
    with pytest.raises(ValueError, match="kv cache dtype"):
        VllmOptions(kv_cache_dtype="int3")
    with pytest.raises(ValueError, match="4 KV heads"):
        VllmOptions(tensor_parallel_size=3)
