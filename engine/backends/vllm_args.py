"""M3's engine arguments for in-process vLLM (SPEC §6.2), chosen from the GPUs and checkpoint.

Plain data in, plain data out: no vllm import here, so the choice is testable anywhere and
the vLLM backend only hands the dict to `AsyncEngineArgs`.

- Parallelism: M3 has 4 KV heads, so tensor parallelism is 1, 2, 4 or 8. The smallest size
  whose weight share fits in GPU memory (with room left for KV cache) is the minimum; all
  local GPUs up to 8 are used, because more ranks mean more KV cache. MoE checkpoints shard
  experts (expert parallelism) when TP > 1. BF16 M3 (~854 GB) needs 8 x 141 GB; FP8 fits 4.
- max_model_len: vLLM 0.33 on NVIDIA ignores `rope_scaling` and its RoPE table stops at
  `max_position_embeddings` (524,288): a longer setting would crash at the first position
  past it, so it is capped and the cap is reported (SPEC §1.4).
- Prefix caching and chunked prefill on, block size 128 (the only size M3's kernels take).
- KV beyond the GPU (docs/kv-cache.md): `kv_connector="lmcache"` hands vLLM's KV to LMCache
  (its `LMCacheConnectorV1`, CPU memory and a disk folder), configured through LMCache's own
  LMCACHE_* environment variables, which the plan lists (a variable already set wins).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..api import EngineUnavailable
from ..model_source import CheckpointFacts

TP_SIZES = (1, 2, 4, 8)
KV_CACHE_DTYPES = ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4")
NVIDIA_MAX_POSITIONS = 524_288
KV_CONNECTORS = ("lmcache",)
LMCACHE_CONNECTOR = "LMCacheConnectorV1"
LMCACHE_CHUNK_TOKENS = 256
EAGLE3_DRAFT = "Inferact/MiniMax-M3-EAGLE3"
# Weights may take this share of a GPU; the rest is KV cache, activations, CUDA graphs.
WEIGHT_SHARE = 0.8


@dataclass(frozen=True, slots=True)
class GpuInfo:
    count: int
    memory_bytes: int  # per GPU
    capability: tuple[int, int] = (9, 0)
    name: str = "GPU"
    rocm: bool = False


@dataclass(frozen=True, slots=True)
class VllmOptions:
    max_model_len: int | None = None  # None: 262,144 or the model's maximum if lower
    kv_cache_dtype: str = "auto"
    indexer_kv_dtype: str | None = None  # "fp8" halves the index cache (SPEC §3.7)
    speculative_draft: str | None = None  # EAGLE3 draft checkpoint; None: no speculation
    num_speculative_tokens: int = 3
    max_num_batched_tokens: int = 16_384
    gpu_memory_utilization: float = 0.9
    max_images: int = 16  # per prompt; 0 and max_videos 0 skip the vision tower
    max_videos: int = 4
    tensor_parallel_size: int | None = None  # None: chosen from GPUs and checkpoint
    verbose: bool = False  # vLLM's periodic stats log (throughput, KV usage); off by default
    # vLLM's KV connector for KV beyond the GPU: None, or "lmcache" (needs `pip install
    # lmcache`): its CPU memory (GB) and, with a folder, its disk tier (GB)
    kv_connector: str | None = None
    kv_offload_cpu_gb: float = 16.0
    kv_offload_disk_dir: str | None = None
    kv_offload_disk_gb: float = 32.0

    def __post_init__(self) -> None:
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(
                f"kv cache dtype {self.kv_cache_dtype!r} is not one of {', '.join(KV_CACHE_DTYPES)}"
            )
        if self.indexer_kv_dtype not in (None, "auto", "bf16", "fp8", "fp8_e4m3"):
            raise ValueError(f"indexer kv dtype {self.indexer_kv_dtype!r} is not auto, bf16 or fp8")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError(f"max_model_len must be positive, got {self.max_model_len}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError("gpu_memory_utilization must be in (0, 1]")
        if self.tensor_parallel_size is not None and self.tensor_parallel_size not in TP_SIZES:
            raise ValueError(f"tensor parallel size must be one of {TP_SIZES} (M3 has 4 KV heads)")
        if self.num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be at least 1")
        if self.max_images < 0 or self.max_videos < 0:
            raise ValueError("image and video limits must be 0 or more")
        if self.kv_connector not in (None, *KV_CONNECTORS):
            raise ValueError(
                f"kv connector {self.kv_connector!r} is not one of {', '.join(KV_CONNECTORS)}"
            )
        if self.kv_offload_cpu_gb <= 0 or self.kv_offload_disk_gb <= 0:
            raise ValueError("the KV offload sizes must be positive (GB)")


@dataclass(frozen=True, slots=True)
class EnginePlan:
    engine_args: dict[str, Any]
    notes: tuple[str, ...]  # what was capped or chosen, for the log and `serve` output
    # environment variables the engine needs (LMCache reads its configuration from there);
    # the backend sets those not already set before loading
    env: tuple[tuple[str, str], ...] = ()

    @property
    def max_model_len(self) -> int:
        return int(self.engine_args["max_model_len"])


def _gb(n: float) -> str:
    return f"{n / 1e9:.0f} GB"


def choose_tp(facts: CheckpointFacts, gpus: GpuInfo, wanted: int | None) -> int:
    if gpus.count < 1:
        raise EngineUnavailable("the vllm engine needs a CUDA GPU and none is visible")
    usable = max(t for t in TP_SIZES if t <= gpus.count)
    budget = gpus.memory_bytes * WEIGHT_SHARE
    needed = next((t for t in TP_SIZES if facts.weight_bytes / t <= budget), None)
    if needed is None or needed > usable:
        need = f"{needed} GPUs" if needed else "more than 8 GPUs"
        raise EngineUnavailable(
            f"the checkpoint's {_gb(facts.weight_bytes)} of weights need {need} of "
            f"{_gb(gpus.memory_bytes)}; {gpus.count} visible. Use an FP8 checkpoint, more GPUs, "
            f"or a vLLM cluster with --engine remote"
        )
    if wanted is not None:
        if wanted > gpus.count:
            raise EngineUnavailable(
                f"tensor parallel size {wanted} needs {wanted} GPUs; {gpus.count} visible"
            )
        if wanted < needed:
            raise EngineUnavailable(
                f"tensor parallel size {wanted} is too small: the weights "
                f"need at least {needed} GPUs of {_gb(gpus.memory_bytes)}"
            )
        return wanted
    return usable


def choose_max_model_len(
    facts: CheckpointFacts, opts: VllmOptions, gpus: GpuInfo, vllm_version: str
) -> tuple[int, list[str]]:
    notes: list[str] = []
    model_max = facts.max_position_embeddings
    scaling = facts.rope_scaling or {}
    factor = float(scaling.get("factor", 1.0) or 1.0)
    if factor > 1.0:
        scaled = int(scaling.get("original_max_position_embeddings", model_max) * factor)
        if gpus.rocm:
            model_max = max(model_max, scaled)
        else:
            notes.append(
                f"vLLM {vllm_version} on NVIDIA ignores rope_scaling (factor {factor:g}): "
                f"serving at most {facts.max_position_embeddings:,} positions, not {scaled:,}"
            )
    if not gpus.rocm:
        model_max = min(model_max, NVIDIA_MAX_POSITIONS, facts.max_position_embeddings)
    wanted = opts.max_model_len if opts.max_model_len is not None else min(262_144, model_max)
    if wanted > model_max:
        notes.append(
            f"max_model_len {wanted:,} is more than vLLM {vllm_version} can serve here "
            f"({model_max:,} positions); using {model_max:,}"
        )
        wanted = model_max
    return wanted, notes


def plan_engine_args(
    model_path: str,
    facts: CheckpointFacts,
    gpus: GpuInfo,
    opts: VllmOptions,
    vllm_version: str = "0.33.0",
    have_lmcache: bool = False,
) -> EnginePlan:
    """The AsyncEngineArgs keyword arguments; EngineUnavailable when this cannot run here.
    have_lmcache: whether the lmcache package is installed (for kv_connector="lmcache")."""
    if facts.is_fp8 and not gpus.rocm and gpus.capability < (8, 9):
        raise EngineUnavailable(
            f"the checkpoint is {facts.quantization}, which needs an NVIDIA GPU of compute "
            f"capability 8.9 or newer (Ada, Hopper, Blackwell); {gpus.name} is "
            f"{gpus.capability[0]}.{gpus.capability[1]}. Use the BF16 checkpoint"
        )
    if opts.kv_cache_dtype.startswith("fp8") and not gpus.rocm and gpus.capability < (8, 9):
        raise EngineUnavailable(
            f"--kv-cache-dtype {opts.kv_cache_dtype} needs compute "
            f"capability 8.9 or newer; {gpus.name} is "
            f"{gpus.capability[0]}.{gpus.capability[1]}"
        )
    if opts.kv_cache_dtype == "nvfp4" and gpus.capability < (10, 0):
        raise EngineUnavailable("--kv-cache-dtype nvfp4 needs a Blackwell GPU (SM100)")
    tp = choose_tp(facts, gpus, opts.tensor_parallel_size)
    max_len, notes = choose_max_model_len(facts, opts, gpus, vllm_version)
    args: dict[str, Any] = {
        "model": model_path,
        "tokenizer": model_path,
        "tensor_parallel_size": tp,
        "enable_expert_parallel": tp > 1 and facts.num_experts > 1,
        "block_size": 128,
        "max_model_len": max_len,
        "enable_prefix_caching": True,
        "enable_chunked_prefill": True,
        "max_num_batched_tokens": opts.max_num_batched_tokens,
        "gpu_memory_utilization": opts.gpu_memory_utilization,
        "kv_cache_dtype": opts.kv_cache_dtype,
        "trust_remote_code": False,
        # vLLM logs throughput and cache usage every few seconds unless told not to.
        "disable_log_stats": not opts.verbose,
    }
    if opts.indexer_kv_dtype not in (None, "auto"):
        args["attention_config"] = {"indexer_kv_dtype": opts.indexer_kv_dtype}
    media = facts.has_vision and (opts.max_images > 0 or opts.max_videos > 0)
    if media:
        args["limit_mm_per_prompt"] = {"image": opts.max_images, "video": opts.max_videos}
        if tp > 1:
            args["mm_encoder_tp_mode"] = "data"
    elif facts.has_vision:
        args["language_model_only"] = True  # text-only agent: skip the vision tower
    if opts.speculative_draft:
        # EAGLE3 is the draft that works on NVIDIA in 0.33; the MTP head does not (SPEC §6.1).
        args["speculative_config"] = {
            "method": "eagle3",
            "model": opts.speculative_draft,
            "num_speculative_tokens": opts.num_speculative_tokens,
            "attention_backend": "FLASH_ATTN",
        }
    notes.append(
        f"tensor parallel {tp}"
        + (" with expert parallelism" if args["enable_expert_parallel"] else "")
        + f" over {gpus.count} x {gpus.name}"
    )
    env: tuple[tuple[str, str], ...] = ()
    if opts.kv_connector == "lmcache":
        env = lmcache_plan(opts, have_lmcache, args, notes)
    return EnginePlan(args, tuple(notes), env)


def lmcache_plan(
    opts: VllmOptions, installed: bool, args: dict[str, Any], notes: list[str]
) -> tuple[tuple[str, str], ...]:
    """vLLM's KV connector to LMCache (CPU memory, and a disk folder when given): the engine
    argument it needs, the LMCACHE_* variables that size it, and a note saying so."""
    if not installed:
        raise EngineUnavailable(
            "--kv-connector lmcache needs the lmcache package in vLLM's environment "
            "(pip install lmcache), or drop the option"
        )
    args["kv_transfer_config"] = {"kv_connector": LMCACHE_CONNECTOR, "kv_role": "kv_both"}
    env = [
        ("LMCACHE_CHUNK_SIZE", str(LMCACHE_CHUNK_TOKENS)),
        ("LMCACHE_LOCAL_CPU", "True"),
        ("LMCACHE_MAX_LOCAL_CPU_SIZE", f"{opts.kv_offload_cpu_gb:g}"),
    ]
    where = f"{opts.kv_offload_cpu_gb:g} GB of CPU memory"
    if opts.kv_offload_disk_dir:
        folder = opts.kv_offload_disk_dir.rstrip("/") + "/"
        env += [
            ("LMCACHE_LOCAL_DISK", f"file://{folder}"),
            ("LMCACHE_MAX_LOCAL_DISK_SIZE", f"{opts.kv_offload_disk_gb:g}"),
        ]
        where += f" and {opts.kv_offload_disk_gb:g} GB in {folder}"
    notes.append(f"KV beyond the GPU: LMCache ({LMCACHE_CONNECTOR}) with {where}")
    return tuple(env)


def probe_gpus() -> GpuInfo:
    """The visible GPUs, through torch (vLLM's own dependency)."""
    try:
        import torch
    except ImportError:
        raise EngineUnavailable("the vllm engine needs torch with CUDA; torch is missing") from None
    if not torch.cuda.is_available():
        raise EngineUnavailable("the vllm engine needs a CUDA GPU and none is visible")
    props = torch.cuda.get_device_properties(0)
    return GpuInfo(
        count=torch.cuda.device_count(),
        memory_bytes=int(props.total_memory),
        capability=(int(props.major), int(props.minor)),
        name=str(props.name),
        rocm=getattr(torch.version, "hip", None) is not None,
    )
