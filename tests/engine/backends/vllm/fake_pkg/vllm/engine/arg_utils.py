"""vLLM 0.33.0's EngineArgs / AsyncEngineArgs: the same dataclass field names (checked against
the real source by tests/engine/backends/vllm/test_fake_matches_vllm.py), so an unknown argument is the
TypeError a real dataclass raises. Defaults are None except where the fake reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class EngineArgs:
    """Arguments for vLLM engine."""

    model: str = "Qwen/Qwen3-0.6B"
    max_model_len: int | None = None
    disable_log_stats: bool = False
    enable_return_routed_experts: Any = None
    return_sampling_mask: Any = None
    model_weights: Any = None
    served_model_name: Any = None
    tokenizer: Any = None
    hf_config_path: Any = None
    runner: Any = None
    convert: Any = None
    skip_tokenizer_init: Any = None
    enable_prompt_embeds: Any = None
    tokenizer_mode: Any = None
    trust_remote_code: Any = None
    allowed_local_media_path: Any = None
    allowed_media_domains: Any = None
    download_dir: Any = None
    safetensors_load_strategy: Any = None
    safetensors_prefetch_num_threads: Any = None
    safetensors_prefetch_block_size: Any = None
    load_format: Any = None
    config_format: Any = None
    dtype: Any = None
    kv_cache_dtype: Any = None
    seed: Any = None
    cudagraph_capture_sizes: Any = None
    max_cudagraph_capture_size: Any = None
    ir_op_priority: Any = None
    distributed_executor_backend: Any = None
    pipeline_parallel_size: Any = None
    master_addr: Any = None
    master_port: Any = None
    nnodes: Any = None
    node_rank: Any = None
    distributed_timeout_seconds: Any = None
    cpu_distributed_timeout_seconds: Any = None
    numa_bind: Any = None
    numa_bind_nodes: Any = None
    numa_bind_cpus: Any = None
    device_ids: Any = None
    tensor_parallel_size: Any = None
    prefill_context_parallel_size: Any = None
    decode_context_parallel_size: Any = None
    dcp_comm_backend: Any = None
    dcp_q_replicate: Any = None
    dcp_kv_cache_interleave_size: Any = None
    cp_kv_cache_interleave_size: Any = None
    data_parallel_size: Any = None
    data_parallel_rank: Any = None
    data_parallel_start_rank: Any = None
    data_parallel_size_local: Any = None
    data_parallel_address: Any = None
    data_parallel_rpc_port: Any = None
    data_parallel_hybrid_lb: Any = None
    data_parallel_external_lb: Any = None
    data_parallel_multi_port_external_lb: Any = None
    data_parallel_backend: Any = None
    enable_hc_sp: Any = None
    enable_expert_parallel: Any = None
    enable_batch_sharded_sampling: Any = None
    enable_ep_weight_filter: Any = None
    moe_backend: Any = None
    linear_backend: Any = None
    sparse_indexer_topk_backend: Any = None
    all2all_backend: Any = None
    enable_elastic_ep: Any = None
    elastic_ep_max_dp_size: Any = None
    enable_dbo: Any = None
    ubatch_size: Any = None
    dbo_decode_token_threshold: Any = None
    dp_sync_interval: Any = None
    dbo_prefill_token_threshold: Any = None
    disable_nccl_for_dp_synchronization: Any = None
    eplb_config: Any = None
    enable_eplb: Any = None
    expert_placement_strategy: Any = None
    _api_process_count: Any = None
    _api_process_rank: Any = None
    max_parallel_loading_workers: Any = None
    block_size: Any = None
    enable_prefix_caching: Any = None
    prefix_caching_hash_algo: Any = None
    prefix_cache_retention_interval: Any = None
    disable_sliding_window: Any = None
    disable_cascade_attn: Any = None
    offload_backend: Any = None
    cpu_offload_gb: Any = None
    cpu_offload_params: Any = None
    offload_group_size: Any = None
    offload_num_in_group: Any = None
    offload_prefetch_step: Any = None
    offload_params: Any = None
    gpu_memory_utilization: Any = None
    kv_cache_memory_bytes: Any = None
    max_num_batched_tokens: Any = None
    max_num_scheduled_tokens: Any = None
    long_prefill_token_threshold: Any = None
    long_prefill_token_threshold_adaptive: Any = None
    max_num_seqs: Any = None
    max_num_active_seqs: Any = None
    max_num_queued_reqs: Any = None
    max_num_queued_tokens: Any = None
    max_logprobs: Any = None
    logprobs_mode: Any = None
    use_fp64_gumbel: Any = None
    enable_trace_replay: Any = None
    aggregate_engine_logging: Any = None
    revision: Any = None
    code_revision: Any = None
    hf_token: Any = None
    hf_overrides: Any = None
    model_class_overrides: Any = None
    tokenizer_revision: Any = None
    quantization: Any = None
    quantization_config: Any = None
    allow_deprecated_quantization: Any = None
    enforce_eager: Any = None
    disable_custom_all_reduce: Any = None
    enable_shm_tensor_arena: Any = None
    language_model_only: Any = None
    limit_mm_per_prompt: Any = None
    enable_mm_embeds: Any = None
    interleave_mm_strings: Any = None
    media_io_kwargs: Any = None
    mm_processor_kwargs: Any = None
    mm_processor_cache_gb: Any = None
    mm_processor_cache_type: Any = None
    mm_hasher_algorithm: Any = None
    mm_shm_cache_max_object_size_mb: Any = None
    mm_encoder_only: Any = None
    mm_encoder_tp_mode: Any = None
    mm_encoder_attn_backend: Any = None
    mm_encoder_attn_dtype: Any = None
    mm_encoder_fp8_scale_path: Any = None
    mm_encoder_fp8_scale_save_path: Any = None
    mm_encoder_fp8_scale_save_margin: Any = None
    io_processor_plugin: Any = None
    renderer_num_workers: Any = None
    skip_mm_profiling: Any = None
    video_pruning_rate: Any = None
    video_pruning_method: Any = None
    mm_tensor_ipc: Any = None
    mm_processor_device: Any = None
    mm_ipc_gpu_memory_gb: Any = None
    mm_device_do_normalize: Any = None
    enable_lora: Any = None
    max_loras: Any = None
    max_lora_rank: Any = None
    default_mm_loras: Any = None
    fully_sharded_loras: Any = None
    max_cpu_loras: Any = None
    lora_dtype: Any = None
    lora_target_modules: Any = None
    enable_tower_connector_lora: Any = None
    specialize_active_lora: Any = None
    enable_mixed_moe_lora_format: Any = None
    enable_moe_shared_loras: Any = None
    max_lora_cls_labels: Any = None
    ray_workers_use_nsight: Any = None
    num_gpu_blocks_override: Any = None
    model_loader_extra_config: Any = None
    ignore_patterns: Any = None
    enable_chunked_prefill: Any = None
    disable_chunked_mm_input: Any = None
    scheduler_reserve_full_isl: Any = None
    prefill_schedule_interval: Any = None
    watermark: Any = None
    disable_hybrid_kv_cache_manager: Any = None
    structured_outputs_config: Any = None
    aux_output_config: Any = None
    reasoning_parser: Any = None
    reasoning_parser_plugin: Any = None
    speculative_config: Any = None
    spec_method: Any = None
    spec_model: Any = None
    spec_tokens: Any = None
    watermark_config: Any = None
    diffusion_config: Any = None
    show_hidden_metrics_for_version: Any = None
    otlp_traces_endpoint: Any = None
    collect_detailed_traces: Any = None
    per_request_spec_decode_metrics: Any = None
    kv_cache_metrics: Any = None
    kv_cache_metrics_sample: Any = None
    custom_histogram_buckets: Any = None
    cudagraph_metrics: Any = None
    enable_layerwise_nvtx_tracing: Any = None
    enable_mfu_metrics: Any = None
    enable_logging_iteration_details: Any = None
    jit_monitor_mode: Any = None
    jit_monitor_verbose: Any = None
    enable_mm_processor_stats: Any = None
    scheduling_policy: Any = None
    scheduler_cls: Any = None
    pooler_config: Any = None
    compilation_config: Any = None
    attention_config: Any = None
    engram_config: Any = None
    mamba_config: Any = None
    kernel_config: Any = None
    enable_flashinfer_autotune: Any = None
    monokernel: Any = None
    worker_cls: Any = None
    worker_extension_cls: Any = None
    profiler_config: Any = None
    logging_config: Any = None
    log_level: Any = None
    log_config_file: Any = None
    kv_transfer_config: Any = None
    kv_events_config: Any = None
    ec_transfer_config: Any = None
    ec_manager_config: Any = None
    reasoning_config: Any = None
    generation_config: Any = None
    enable_sleep_mode: Any = None
    sleep_mode_backend: Any = None
    sleep_mode_offload_cudagraph: Any = None
    sleep_preserve_parameter_names: Any = None
    enable_cumem_allocator: Any = None
    enable_nccl_comm_suspend: Any = None
    override_generation_config: Any = None
    model_impl: Any = None
    attention_backend: Any = None
    kv_cache_dtype_skip_layers: Any = None
    mamba_cache_dtype: Any = None
    mamba_ssm_cache_dtype: Any = None
    mamba_block_size: Any = None
    prefix_match_unit: Any = None
    mamba_cache_mode: Any = None
    enable_mamba_shared_prefix_checkpoint: Any = None
    replayssm_buffer_len: Any = None
    use_replayssm: Any = None
    mamba_backend: Any = None
    mamba_ssu_algorithm: Any = None
    enable_mamba_cache_stochastic_rounding: Any = None
    mamba_cache_philox_rounds: Any = None
    additional_config: Any = None
    use_tqdm_on_load: Any = None
    pt_load_map_location: Any = None
    logits_processors: Any = None
    async_scheduling: Any = None
    stream_interval: Any = None
    kv_sharing_fast_prefill: Any = None
    swa_bounded_replay: Any = None
    optimization_level: Any = None
    performance_mode: Any = None
    fault_tolerance_config: Any = None
    enable_fault_tolerance: Any = None
    kv_offloading_size: Any = None
    kv_offloading_backend: Any = None
    tokens_only: Any = None
    shutdown_timeout: Any = None
    watchdog_config: Any = None
    weight_transfer_config: Any = None
    fail_on_environ_validation: Any = None
    gdn_prefill_backend: Any = None
    kda_prefill_backend: Any = None
    kda_decode_backend: Any = None


@dataclass
class AsyncEngineArgs(EngineArgs):
    """Arguments for asynchronous vLLM engine."""

    enable_log_requests: bool = False


_init = AsyncEngineArgs.__init__


def _recording_init(self: AsyncEngineArgs, *args: Any, **kwargs: Any) -> None:
    from vllm import FAKE

    _init(self, *args, **kwargs)  # TypeError for a field vLLM does not have
    FAKE.engine_args.append(dict(kwargs))


AsyncEngineArgs.__init__ = _recording_init  # type: ignore[method-assign]
