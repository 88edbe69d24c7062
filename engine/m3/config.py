"""MiniMax M3 config.json as frozen dataclasses (SPEC §1.2).

Accepts the released layout (`model_type: minimax_m3_vl` with a `text_config` dict) or a bare
text config. Defaults are those of vLLM's MiniMaxM3TextConfig, which mirror the checkpoint.
Unknown keys are ignored (the checkpoint carries many fields vLLM never reads).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..json_file import read_json_object

_SPARSE_DEFAULT_FREQ = (0,) * 3 + (1,) * 57


@dataclass(frozen=True, slots=True)
class SparseAttentionConfig:
    sparse_attention_freq: tuple[int, ...] = _SPARSE_DEFAULT_FREQ
    sparse_num_index_heads: int = 4
    sparse_index_dim: int = 128
    sparse_topk_blocks: int = 16
    sparse_block_size: int = 128
    sparse_init_block: int = 0
    sparse_local_block: int = 1
    sparse_score_type: str = "max"
    sparse_disable_index_value: tuple[int, ...] = _SPARSE_DEFAULT_FREQ  # not read by vLLM
    use_sparse_attention: bool = True  # not read by vLLM


@dataclass(frozen=True, slots=True)
class RopeScaling:
    """YaRN parameters (`rope_scaling` of the config, or an override)."""

    rope_type: str = "yarn"
    factor: float = 1.0
    original_max_position_embeddings: int = 524288
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None


@dataclass(frozen=True, slots=True)
class M3TextConfig:
    vocab_size: int = 200064
    hidden_size: int = 6144
    num_hidden_layers: int = 60
    num_attention_heads: int = 64
    num_key_value_heads: int = 4
    head_dim: int = 128
    max_position_embeddings: int = 524288
    rope_theta: float = 5_000_000.0
    partial_rotary_factor: float = 0.5
    rms_norm_eps: float = 1e-6
    hidden_act: str = "swigluoai"
    swiglu_alpha: float = 1.702
    swiglu_beta: float = 1.0
    swiglu_limit: float = 7.0
    intermediate_size: int = 3072
    dense_intermediate_size: int = 12288
    num_local_experts: int = 128
    num_experts_per_tok: int = 4
    n_shared_experts: int = 1
    scoring_func: str = "sigmoid"
    use_routing_bias: bool = True
    routed_scaling_factor: float = 2.0
    moe_layer_freq: tuple[int, ...] | None = _SPARSE_DEFAULT_FREQ  # None: every layer MoE
    num_mtp_modules: int = 1
    tie_word_embeddings: bool = False
    sparse_attention_config: SparseAttentionConfig = field(default_factory=SparseAttentionConfig)
    rope_scaling: RopeScaling | None = None
    eos_token_id: tuple[int, ...] = ()
    bos_token_id: int | None = None

    def __post_init__(self) -> None:
        _validate(self)

    # --- derived -----------------------------------------------------------------------
    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    def is_sparse_layer(self, i: int) -> bool:
        return self.sparse_attention_config.sparse_attention_freq[i] != 0

    def is_moe_layer(self, i: int) -> bool:
        return self.moe_layer_freq is None or self.moe_layer_freq[i] != 0

    @property
    def max_model_len(self) -> int:
        """Positions the model can serve: YaRN stretches the original window by `factor`."""
        rs = self.rope_scaling
        if rs is None or rs.factor <= 1.0:
            return self.max_position_embeddings
        return max(
            self.max_position_embeddings, int(rs.original_max_position_embeddings * rs.factor)
        )

    def with_rope_scaling(self, rope_scaling: RopeScaling | dict[str, Any] | None) -> M3TextConfig:
        if isinstance(rope_scaling, dict):
            rope_scaling = parse_rope_scaling(rope_scaling, self.max_position_embeddings)
        return replace(self, rope_scaling=rope_scaling)


@dataclass(frozen=True, slots=True)
class M3Config:
    """The top-level `minimax_m3_vl` config; `vision_config` stays a raw dict (not ours)."""

    text_config: M3TextConfig
    model_type: str = "minimax_m3_vl"
    architectures: tuple[str, ...] = ("MiniMaxM3SparseForConditionalGeneration",)
    vision_config: dict[str, Any] | None = None
    projector_hidden_size: int | None = None
    quantization_config: dict[str, Any] | None = None


def _check_layer_list(name: str, values: tuple[int, ...] | None, n: int) -> None:
    if values is not None and len(values) != n:
        raise ValueError(f"config: {name} has {len(values)} entries, num_hidden_layers is {n}")


def _validate(c: M3TextConfig) -> None:
    for name in (
        "vocab_size",
        "hidden_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
    ):
        if getattr(c, name) <= 0:
            raise ValueError(f"config: {name} must be positive, got {getattr(c, name)}")
    if c.num_attention_heads % c.num_key_value_heads:
        raise ValueError(
            f"config: num_attention_heads ({c.num_attention_heads}) is not a multiple of "
            f"num_key_value_heads ({c.num_key_value_heads})"
        )
    if c.head_dim % 2 or not 0 < c.partial_rotary_factor <= 1 or c.rotary_dim % 2:
        raise ValueError(
            f"config: partial_rotary_factor {c.partial_rotary_factor} with head_dim {c.head_dim} "
            "gives no even rotary_dim"
        )
    if c.hidden_act != "swigluoai":
        raise ValueError(f"config: hidden_act must be 'swigluoai', got {c.hidden_act!r}")
    if c.scoring_func != "sigmoid":
        raise ValueError(f"config: scoring_func must be 'sigmoid', got {c.scoring_func!r}")
    n = c.num_hidden_layers
    _check_layer_list("moe_layer_freq", c.moe_layer_freq, n)
    s = c.sparse_attention_config
    _check_layer_list("sparse_attention_config.sparse_attention_freq", s.sparse_attention_freq, n)
    if any(c.is_moe_layer(i) for i in range(n)):
        if not 0 < c.num_experts_per_tok <= c.num_local_experts:
            raise ValueError(
                f"config: num_experts_per_tok ({c.num_experts_per_tok}) must be in "
                f"1..num_local_experts ({c.num_local_experts})"
            )
    if any(c.is_sparse_layer(i) for i in range(n)):
        if s.sparse_num_index_heads != c.num_key_value_heads:
            raise ValueError(
                f"config: sparse_attention_config.sparse_num_index_heads "
                f"({s.sparse_num_index_heads}) must equal num_key_value_heads "
                f"({c.num_key_value_heads}): selection is per KV head"
            )
        if s.sparse_index_dim != c.head_dim:
            raise ValueError(
                f"config: sparse_attention_config.sparse_index_dim ({s.sparse_index_dim}) must "
                f"equal head_dim ({c.head_dim}): the index branch shares the partial RoPE"
            )
        if s.sparse_block_size != 128:
            raise ValueError(
                f"config: sparse_attention_config.sparse_block_size must be 128, got "
                f"{s.sparse_block_size}"
            )
        if s.sparse_score_type != "max":
            raise ValueError(
                f"config: sparse_attention_config.sparse_score_type must be 'max', got "
                f"{s.sparse_score_type!r}"
            )
        if (
            s.sparse_local_block < 0
            or s.sparse_init_block < 0
            or (s.sparse_init_block + s.sparse_local_block > s.sparse_topk_blocks)
        ):
            raise ValueError(
                "config: sparse_attention_config needs 0 <= sparse_init_block + "
                f"sparse_local_block <= sparse_topk_blocks, got {s.sparse_init_block} + "
                f"{s.sparse_local_block} > {s.sparse_topk_blocks}"
            )
    rs = c.rope_scaling
    if rs is not None:
        if rs.rope_type != "yarn":
            raise ValueError(
                f"config: rope_scaling.rope_type {rs.rope_type!r} is not supported (only 'yarn')"
            )
        if rs.factor < 1.0:
            raise ValueError(f"config: rope_scaling.factor must be >= 1, got {rs.factor}")


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


def parse_rope_scaling(
    d: dict[str, Any] | None, max_position_embeddings: int
) -> RopeScaling | None:
    if not d:
        return None
    d = dict(d)
    d["rope_type"] = d.pop("rope_type", d.pop("type", "yarn"))
    d.setdefault("original_max_position_embeddings", max_position_embeddings)
    try:
        return RopeScaling(**_known(RopeScaling, d))
    except TypeError as e:
        raise ValueError(f"config: bad rope_scaling {d}: {e}") from None


def _as_tuple(v: Any) -> Any:
    return tuple(int(x) for x in v) if isinstance(v, list | tuple) else v


def parse_text_config(
    d: dict[str, Any], rope_scaling_override: dict[str, Any] | None = None
) -> M3TextConfig:
    kw = _known(M3TextConfig, d)
    for k in ("moe_layer_freq",):
        if k in kw:
            kw[k] = _as_tuple(kw[k])
    sp = dict(d.get("sparse_attention_config") or {})
    for k in ("sparse_attention_freq", "sparse_disable_index_value"):
        if k in sp:
            sp[k] = _as_tuple(sp[k])
    n = int(d.get("num_hidden_layers", 60))
    if "sparse_attention_freq" not in sp and n != 60:
        # The 60-layer default cannot describe another depth: first 3 dense, rest sparse.
        sp["sparse_attention_freq"] = tuple(0 if i < 3 else 1 for i in range(n))
    if "moe_layer_freq" not in d and n != 60:
        kw["moe_layer_freq"] = None  # "missing -> all MoE" (SPEC §1.2)
    kw["sparse_attention_config"] = SparseAttentionConfig(**_known(SparseAttentionConfig, sp))
    eos = d.get("eos_token_id")
    kw["eos_token_id"] = (
        ()
        if eos is None
        else (tuple(int(x) for x in eos) if isinstance(eos, list) else (int(eos),))
    )
    mpe = int(d.get("max_position_embeddings", 524288))
    kw["rope_scaling"] = parse_rope_scaling(
        rope_scaling_override if rope_scaling_override is not None else d.get("rope_scaling"), mpe
    )
    try:
        return M3TextConfig(**kw)
    except TypeError as e:
        raise ValueError(f"config: {e}") from None


def parse_config(
    d: dict[str, Any], rope_scaling_override: dict[str, Any] | None = None
) -> M3Config:
    """A `minimax_m3_vl` dict (with text_config) or a bare text config dict."""
    if "text_config" in d:
        text = parse_text_config(d["text_config"], rope_scaling_override)
        return M3Config(
            text_config=text,
            model_type=d.get("model_type", "minimax_m3_vl"),
            architectures=tuple(
                d.get("architectures") or ("MiniMaxM3SparseForConditionalGeneration",)
            ),
            vision_config=d.get("vision_config"),
            projector_hidden_size=d.get("projector_hidden_size"),
            quantization_config=d.get("quantization_config"),
        )
    text = parse_text_config(d, rope_scaling_override)
    return M3Config(
        text_config=text,
        model_type=d.get("model_type", "minimax_m3_text"),
        architectures=tuple(d.get("architectures") or ("MiniMaxM3SparseForCausalLM",)),
        quantization_config=d.get("quantization_config"),
    )


def load_config(path: str | Path, rope_scaling_override: dict[str, Any] | None = None) -> M3Config:
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    return parse_config(read_json_object(p), rope_scaling_override)


def text_config_to_dict(c: M3TextConfig) -> dict[str, Any]:
    """The HF `text_config` dict (lists, not tuples) for writing config.json."""
    d = asdict(c)
    d["model_type"] = "minimax_m3_text"
    for k, v in list(d.items()):
        if isinstance(v, tuple):
            d[k] = list(v)
    if c.moe_layer_freq is None:
        d.pop("moe_layer_freq")
    d["sparse_attention_config"] = {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in asdict(c.sparse_attention_config).items()
    }
    if c.rope_scaling is None:
        d.pop("rope_scaling")
    if not c.eos_token_id:
        d.pop("eos_token_id")
    elif len(c.eos_token_id) == 1:
        d["eos_token_id"] = c.eos_token_id[0]
    if c.bos_token_id is None:
        d.pop("bos_token_id")
    return d
