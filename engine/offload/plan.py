"""Placement of the full M3 on one GPU with the routed experts in host memory.

GPU: attention and the MSA indexer, the dense layers, shared experts, router, embeddings and
head (as stored: FP8 stays FP8), the KV cache and index keys, a workspace for one prefill
chunk, double buffers for streaming experts during prefill, and, in what is left, a cache of
hot experts (in bf16, as engine/offload/hot_cache.py holds them). Host: every routed
expert, pinned in place, in a form the CPU computes with.

The bounds are byte bounds: a decode step cannot be faster than reading its bytes at the
measured bandwidths (host experts over the host's read bandwidth, the rest over the GPU's), and
a streamed prefill pass cannot be faster than moving every expert over PCIe once. The hot-expert
hit rate assumes uniform routing (a lower bound: real routing is skewed towards some experts).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from math import ceil

from ..m3.config import M3TextConfig
from .hardware import GIB, Machine
from .inventory import Inventory, Part, StorageFormat
from .kv_bytes import (
    PAGE,
    kv_bytes_per_token,
    kv_fetch_per_token,
    kv_read_per_token,
    msa_kv_bytes_per_token,
)

CUDA_CONTEXT = int(1.5 * GIB)  # driver context, allocator slack, CUDA graphs
HOST_OVERHEAD = 4 * GIB  # the process itself, tokenizer, page tables, Python
GPU_MARGIN = 0.04  # left free on the GPU: fragmentation and the unexpected
# What the native engine's KV cache takes on a GPU when nothing caps it lower: this many whole
# contexts, within this share of the free memory (native/core: GPU_FULL_CONTEXTS and
# EngineConfig.gpu_memory_utilization's default; serve --gpu-memory-utilization changes it).
# Kept here because engine_config imports torch; a test holds them equal.
SERVE_CONTEXTS = 4
SERVE_KV_SHARE = 0.9
KNOWN_BF16_TFLOPS = {"H200": 784e12, "H100": 700e12}


class ExpertForm(StrEnum):
    AUTO = "auto"
    STORED = "stored"  # as the checkpoint stores them (bf16, or fp8 with its scales)
    INT8 = "int8"  # int8 weights, one fp32 scale per output row (AMX / VNNI int8)
    INT4 = "int4"  # 4-bit weights, bf16 scale and min per group of 128 along k (4.25 bits)
    MXFP8 = "mxfp8"  # e4m3 values, e8m0 scale per 1x32 block (the released checkpoint's form)
    BF16 = "bf16"


@dataclass(frozen=True, slots=True)
class PlanRequest:
    context_len: int = 131072
    max_seqs: int = 1
    kv_cache_dtype: str = "fp8"  # fp8 (e4m3 K/V and index keys) or bf16
    expert_form: ExpertForm = ExpertForm.AUTO
    chunk_tokens: int = 8192  # prefill chunk (workspace size)
    stream_experts: int = 32  # experts per streamed transfer (two such buffers on the GPU)
    stream_pass_tokens: int = 65536  # tokens prefilled per pass of streamed experts
    # Fill the GPU's remaining memory with hot experts. Off as in the engine, which holds them
    # only when the hot_experts setting asks (choose.py): the plan is what run and serve do.
    hot_experts: bool = False
    moe_layers: int | None = None  # host experts for only this many MoE layers (benchmarks)
    # The host-memory tier of MSA's K/V pages (docs/kv-cache.md): None chooses it when the
    # KV cache does not fit the GPU; True / False force it on / off.
    kv_host_tier: bool | None = None
    kv_device_blocks: int = 128  # its device cache per MSA layer (EngineConfig's default)

    def __post_init__(self) -> None:
        if self.context_len < PAGE:
            raise ValueError(f"context length must be >= {PAGE}, got {self.context_len}")
        if self.kv_cache_dtype not in ("fp8", "bf16"):
            raise ValueError(f"kv cache dtype must be fp8 or bf16, got {self.kv_cache_dtype!r}")
        names = ("max_seqs", "chunk_tokens", "stream_experts", "stream_pass_tokens")
        for name in (*names, "kv_device_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', ' ')} must be >= 1")


@dataclass(frozen=True, slots=True)
class Row:
    where: str  # "gpu" or "host"
    label: str
    nbytes: int


@dataclass(frozen=True, slots=True)
class Plan:
    rows: tuple[Row, ...]
    gpu_capacity: int
    host_capacity: int
    expert_form: ExpertForm
    hot_per_layer: int
    kv_bytes_per_token: int
    decode_host_s: float  # per token, batch 1, at the full context
    decode_gpu_s: float
    stream_pass_s: float  # one pass of every expert over PCIe
    ttft_1m_s: float | None  # streamed prefill of a 1M-token prompt (byte/FLOP bound)
    moe_layers_on_host: int
    moe_layers_total: int
    kv_host_tier: bool = False  # MSA K/V pages in host memory, selected blocks fetched
    # per token, batch 1: every MSA layer's selected blocks over PCIe when none is cached
    decode_fetch_s: float = 0.0

    def total(self, where: str) -> int:
        return sum(r.nbytes for r in self.rows if r.where == where)

    @property
    def fits(self) -> bool:
        return self.total("gpu") <= self.gpu_capacity and self.total("host") <= self.host_capacity

    @property
    def tokens_per_s(self) -> float:
        """Decode bound with the CPU experts overlapped with the GPU's work (and the host
        tier's fetches, not yet overlapped with it)."""
        return 1.0 / max(self.decode_host_s, self.decode_gpu_s + self.decode_fetch_s)


def host_expert_bytes(c: M3TextConfig, stored: int, fmt: StorageFormat, form: ExpertForm) -> int:
    weights = 3 * c.hidden_size * c.intermediate_size
    if form is ExpertForm.STORED:
        return stored
    if form is ExpertForm.BF16:
        return 2 * weights
    rows = 2 * c.intermediate_size + c.hidden_size  # gate, up (I rows each), down (h rows)
    if form is ExpertForm.INT4:  # half a byte a weight, bf16 scale + min per 128 (forms.py)
        return weights // 2 + 4 * (weights // 128)
    if form is ExpertForm.MXFP8:  # one byte a weight, one e8m0 byte per 32
        return weights + weights // 32
    return weights + 4 * rows


def active_params_per_token(c: M3TextConfig) -> int:
    """Weights one token multiplies by (embeddings excluded): for the compute bound."""
    h, hd = c.hidden_size, c.head_dim
    sp = c.sparse_attention_config
    n = c.vocab_size * h  # lm head
    for i in range(c.num_hidden_layers):
        n += 2 * c.num_attention_heads * hd * h + 2 * c.num_key_value_heads * hd * h
        if c.is_sparse_layer(i):
            n += (sp.sparse_num_index_heads + 1) * sp.sparse_index_dim * h
        if c.is_moe_layer(i):
            n += 3 * h * c.intermediate_size * (c.num_experts_per_tok + c.n_shared_experts)
        else:
            n += 3 * h * c.dense_intermediate_size
    return n


def _workspace(c: M3TextConfig, req: PlanRequest) -> int:
    t = req.chunk_tokens
    q = c.num_attention_heads * c.head_dim
    wide = max(c.dense_intermediate_size, c.intermediate_size * c.num_experts_per_tok)
    acts = t * (8 * c.hidden_size + 4 * q + 3 * wide) * 2
    logits = req.max_seqs * c.vocab_size * 4 * 2
    return acts + logits


def _resolve_form(req: PlanRequest, inv: Inventory, fits_bf16: bool) -> ExpertForm:
    if req.expert_form is not ExpertForm.AUTO:
        return req.expert_form
    if inv.fmt is StorageFormat.BF16:
        return ExpertForm.BF16 if fits_bf16 else ExpertForm.INT8
    return ExpertForm.INT8  # FP8 has no CPU arithmetic: int8 is the same size and AMX-native


def make_plan(c: M3TextConfig, inv: Inventory, m: Machine, req: PlanRequest) -> Plan:
    """The placement: the host's rows (the routed experts in their CPU form), the GPU's
    (everything else, the KV cache split with the host tier where it does not fit, hot experts
    in what is left) and the byte bounds of decode and streamed prefill."""
    moe = _host_moe_layers(inv, req)
    n_exp = {layer: inv.experts[layer][0] for layer in moe}  # routed experts per layer
    form = _resolve_form(req, inv, _host_fits_bf16(c, inv, moe, m.host_bytes))
    per_host = _host_expert_bytes(c, inv, moe, form)
    h_rows = _host_expert_rows(moe, n_exp, per_host, form)

    tokens = req.max_seqs * ceil(req.context_len / PAGE) * PAGE
    stream_buf = 2 * req.stream_experts * max(per_host.values(), default=0)
    g_rows = _gpu_rows(c, inv, req, tokens, stream_buf)
    gpu_usable = int(m.gpu_bytes * (1 - GPU_MARGIN))
    tier = req.kv_host_tier
    if tier is None:  # chosen when the whole KV cache would not fit
        tier = sum(r.nbytes for r in g_rows) > gpu_usable
    if tier:
        g_rows, tier_rows = _host_tier_rows(c, req, g_rows, tokens)
        h_rows = tier_rows + h_rows
    hot = 0
    if req.hot_experts and moe:
        left = gpu_usable - sum(r.nbytes for r in g_rows)
        hot, hot_row = _hot_expert_cache(c, inv, n_exp, per_host, left)
        if hot:
            g_rows.append(hot_row)
    if not tier and not hot:
        g_rows += _serve_kv_rows(c, req, g_rows, tokens, m.gpu_bytes)

    host_bytes, gpu_bytes = _decode_bytes(c, inv, req, n_exp, per_host, hot)
    stream_pass = sum(n_exp[layer] * per_host[layer] for layer in moe) / m.pcie_bw
    return Plan(
        rows=tuple(g_rows + h_rows),
        gpu_capacity=m.gpu_bytes,
        host_capacity=m.host_bytes,
        expert_form=form,
        hot_per_layer=hot,
        kv_bytes_per_token=kv_bytes_per_token(c, req.kv_cache_dtype),
        decode_host_s=host_bytes / m.host_read_bw,
        decode_gpu_s=gpu_bytes / m.gpu_read_bw,
        stream_pass_s=stream_pass,
        ttft_1m_s=_ttft_1m(c, m, req, stream_pass),
        moe_layers_on_host=len(moe),
        moe_layers_total=len(inv.experts),
        kv_host_tier=tier,
        decode_fetch_s=(
            kv_fetch_per_token(c, req.kv_cache_dtype, req.context_len) / m.pcie_bw if tier else 0.0
        ),
    )


def _serve_kv_rows(
    c: M3TextConfig, req: PlanRequest, g_rows: list[Row], tokens: int, capacity: int
) -> list[Row]:
    """The KV pages a server takes beyond the planned context's, so the plan is what the GPU
    will hold: the engine sizes its cache for up to SERVE_CONTEXTS whole contexts of the
    model's own length, within SERVE_KV_SHARE of the memory the rest leaves
    (native/core/cache_setup.py). Not needed to fit: a smaller card gets fewer pages."""
    per_token = kv_bytes_per_token(c, req.kv_cache_dtype)
    planned = tokens * per_token  # the KV row's bytes
    budget = SERVE_KV_SHARE * (capacity - (sum(r.nbytes for r in g_rows) - planned))
    whole = SERVE_CONTEXTS * ceil(c.max_model_len / PAGE) * PAGE * per_token
    extra = int(min(whole, budget)) - planned
    if extra <= 0:
        return []
    label = f"KV pages serve adds (up to {SERVE_CONTEXTS} x {c.max_model_len:,} tokens)"
    return [Row("gpu", label, extra)]


def _host_moe_layers(inv: Inventory, req: PlanRequest) -> list[int]:
    """The MoE layers whose routed experts the plan holds in host memory: all of them, or the
    first --moe-layers (benchmarks)."""
    moe = sorted(inv.experts)
    if req.moe_layers is not None:
        if not 0 <= req.moe_layers <= len(moe):
            raise ValueError(f"--moe-layers must be 0..{len(moe)}, got {req.moe_layers}")
        moe = moe[: req.moe_layers]
    return moe


def _host_expert_bytes(
    c: M3TextConfig, inv: Inventory, moe: list[int], form: ExpertForm
) -> dict[int, int]:
    """Per MoE layer: the bytes of one routed expert in `form` (from its stored size)."""
    return {layer: host_expert_bytes(c, inv.experts[layer][1], inv.fmt, form) for layer in moe}


def _host_expert_rows(
    moe: list[int], n_exp: dict[int, int], per_host: dict[int, int], form: ExpertForm
) -> list[Row]:
    experts = sum(n_exp[layer] * per_host[layer] for layer in moe)
    # pinned in place (placement.py): streamed prefill copies from them, no staging
    return [
        Row("host", f"routed experts, {form}, pinned ({len(moe)} layers)", experts),
        Row("host", "process overhead", HOST_OVERHEAD),
    ]


def _host_fits_bf16(c: M3TextConfig, inv: Inventory, moe: list[int], host_cap: int) -> bool:
    """Whether the routed experts fit host memory in bf16 (auto keeps a bf16 checkpoint so)."""
    n_exp = {layer: inv.experts[layer][0] for layer in moe}
    per = _host_expert_bytes(c, inv, moe, ExpertForm.BF16)
    rows = _host_expert_rows(moe, n_exp, per, ExpertForm.BF16)
    return sum(r.nbytes for r in rows) <= host_cap


def _gpu_rows(
    c: M3TextConfig, inv: Inventory, req: PlanRequest, tokens: int, stream_buf: int
) -> list[Row]:
    """What the GPU holds before any hot expert: the weights as stored, the whole KV cache,
    the prefill workspace and stream buffers, the CUDA context; rows of no bytes left out."""
    p = inv.parts
    rows = [
        Row("gpu", "attention + MSA indexer", p[Part.ATTENTION]),
        Row("gpu", "dense MLP layers", p[Part.DENSE_MLP]),
        Row("gpu", "shared experts", p[Part.SHARED_EXPERTS]),
        Row("gpu", "router + norms", p[Part.ROUTER] + p[Part.NORMS]),
        Row("gpu", "embeddings + lm head", p[Part.EMBEDDINGS] + p[Part.LM_HEAD]),
        Row("gpu", "vision tower", p[Part.VISION]),
        Row(
            "gpu",
            f"KV cache + index keys, {req.kv_cache_dtype} "
            f"({req.max_seqs} x {req.context_len:,} tokens)",
            tokens * kv_bytes_per_token(c, req.kv_cache_dtype),
        ),
        Row("gpu", f"workspace ({req.chunk_tokens:,}-token chunk)", _workspace(c, req)),
        Row("gpu", "expert stream buffers (prefill)", stream_buf),
        Row("gpu", "CUDA context, allocator, graphs", CUDA_CONTEXT),
    ]
    return [r for r in rows if r.nbytes]


def _hot_expert_cache(
    c: M3TextConfig, inv: Inventory, n_exp: dict[int, int], per_host: dict[int, int], left: int
) -> tuple[int, Row]:
    """How many hot experts per MoE layer the GPU's `left` bytes hold, and their row."""
    hot_one = 2 * inv.expert_params(c)  # a hot expert's bf16 bytes
    # the GPU cache holds each hot expert in bf16, plus one expert in the host form per
    # layer to dequantise an upload from (hot_cache.py)
    staging = max(per_host.values()) * len(n_exp)
    hot = 0
    if left > 0:
        hot = min(min(n_exp.values()), max(0, left - staging) // (hot_one * len(n_exp)))
    label = f"hot-expert cache ({hot} per MoE layer, bf16)"
    return hot, Row("gpu", label, hot * hot_one * len(n_exp) + staging)


def _decode_bytes(
    c: M3TextConfig,
    inv: Inventory,
    req: PlanRequest,
    n_exp: dict[int, int],
    per_host: dict[int, int],
    hot: int,
) -> tuple[float, float]:
    """The bytes one decode token reads (batch 1, at the full context): from host memory (the
    routed experts not in the hot cache) and from the GPU's (weights, hot experts, KV)."""
    k = c.num_experts_per_tok
    host_bytes = sum(k * (1 - hot / n_exp[layer]) * per_host[layer] for layer in n_exp)
    p = inv.parts
    gpu_weights = (
        p[Part.ATTENTION]
        + p[Part.DENSE_MLP]
        + p[Part.SHARED_EXPERTS]
        + p[Part.ROUTER]
        + p[Part.NORMS]
        + p[Part.LM_HEAD]
    )
    hot_one = 2 * inv.expert_params(c)
    gpu_hot = sum(k * hot / n_exp[layer] * hot_one for layer in n_exp)
    gpu_bytes = gpu_weights + gpu_hot + kv_read_per_token(c, req.kv_cache_dtype, req.context_len)
    return host_bytes, gpu_bytes


def _ttft_1m(c: M3TextConfig, m: Machine, req: PlanRequest, stream_pass: float) -> float | None:
    """The bound on a streamed prefill of 1M tokens: each pass as slow as moving every expert
    over PCIe or as its FLOPs, whichever is slower; None for a GPU of unknown FLOPs."""
    flops = [v for key, v in KNOWN_BF16_TFLOPS.items() if key in m.gpu_name.upper()]
    if not flops:
        return None
    passes = ceil(1_048_576 / req.stream_pass_tokens)
    compute = 2 * active_params_per_token(c) * req.stream_pass_tokens / flops[0]
    return passes * max(stream_pass, compute)


def _host_tier_rows(
    c: M3TextConfig, req: PlanRequest, g_rows: list[Row], tokens: int
) -> tuple[list[Row], list[Row]]:
    """The GPU rows with the host tier (the KV row split into what stays on the GPU and the
    tier's device cache) and the host row of the MSA K/V pages."""
    msa = sum(c.is_sparse_layer(i) for i in range(c.num_hidden_layers))
    msa_kv = msa_kv_bytes_per_token(c, req.kv_cache_dtype)
    block_cache = req.kv_device_blocks * PAGE * msa_kv
    out = []
    for r in g_rows:
        if not r.label.startswith("KV cache"):
            out.append(r)
            continue
        out.append(
            Row(
                "gpu",
                f"index keys + dense-layer KV, {req.kv_cache_dtype} "
                f"({req.max_seqs} x {req.context_len:,})",
                r.nbytes - tokens * msa_kv,
            )
        )
        out.append(
            Row(
                "gpu",
                f"host-tier block cache ({req.kv_device_blocks} x {msa} MSA layers)",
                block_cache,
            )
        )
    host = Row(
        "host",
        f"KV host tier: MSA K/V pages, {req.kv_cache_dtype}, pinned",
        tokens * msa_kv,
    )
    return out, [host]
