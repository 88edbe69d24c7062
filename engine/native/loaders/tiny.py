"""Random MiniMax M3 checkpoints in HF layout, for tests and for trying the pipeline on a CPU.

Writes config.json (`minimax_m3_vl` with `text_config`), sharded safetensors with the
checkpoint's own weight names (`language_model.model.layers.N...`) and an index json,
generation_config.json and a byte-level tokenizer holding M3's special tokens. Deterministic
for a seed; optionally FP8 (e4m3, 128x128 block scales) like the released FP8 checkpoints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ...m3 import tokens as m3tokens
from ...m3.config import M3TextConfig, SparseAttentionConfig, text_config_to_dict
from .fp8 import quantize_fp8, quantize_mxfp8

if TYPE_CHECKING:
    from tokenizers import Tokenizer

PREFIX = "language_model."


@dataclass(frozen=True, slots=True)
class TinySpec:
    layers: int = 4
    hidden: int = 256
    heads: int = 4
    kv_heads: int = 2
    experts: int = 4
    vocab: int = 512
    seed: int = 0
    dense_layers: int = 1
    fp8: bool = False
    mxfp8: bool = False  # e4m3 with one e8m0 scale per 1x32 block (ModelOpt MXFP8)
    head_dim: int = 128
    topk_blocks: int = 16
    experts_per_tok: int = 2
    intermediate: int = 128
    dense_intermediate: int = 256
    max_position_embeddings: int = 524288

    def __post_init__(self) -> None:
        if not 0 <= self.dense_layers <= self.layers:
            raise ValueError(
                f"--dense-layers {self.dense_layers} must be in 0..--layers ({self.layers})"
            )
        if self.fp8 and self.mxfp8:
            raise ValueError("--fp8 and --mxfp8 are two formats: pick one")
        need = 256 + len(m3tokens.ALL_ADDED_TOKENS)
        if self.vocab < need:
            raise ValueError(
                f"--vocab {self.vocab} is too small: the byte-level tokenizer needs {need} ids"
            )


def tiny_text_config(s: TinySpec, eos_id: int, bos_id: int) -> M3TextConfig:
    plan = tuple(0 if i < s.dense_layers else 1 for i in range(s.layers))
    return M3TextConfig(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        head_dim=s.head_dim,
        max_position_embeddings=s.max_position_embeddings,
        intermediate_size=s.intermediate,
        dense_intermediate_size=s.dense_intermediate,
        num_local_experts=s.experts,
        num_experts_per_tok=min(s.experts_per_tok, s.experts),
        moe_layer_freq=plan,
        num_mtp_modules=0,
        sparse_attention_config=SparseAttentionConfig(
            sparse_attention_freq=plan,
            sparse_num_index_heads=s.kv_heads,
            sparse_index_dim=s.head_dim,
            sparse_topk_blocks=s.topk_blocks,
            sparse_disable_index_value=plan,
        ),
        eos_token_id=(eos_id,),
        bos_token_id=bos_id,
    )


def random_weights(c: M3TextConfig, seed: int) -> dict[str, torch.Tensor]:
    """Text-layout names (`model.layers.N...`, `lm_head.weight`) -> fp32 tensors."""
    from ..models.m3 import M3ForCausalLM

    g = torch.Generator().manual_seed(seed)
    shell = M3ForCausalLM(c, dtype=torch.float32, device="meta")
    out: dict[str, torch.Tensor] = {}
    for name, p in shell.named_parameters():
        shape = tuple(p.shape)
        if name.endswith("norm.weight"):  # Gemma offsets from 1
            t = torch.randn(shape, generator=g) * 0.1
        elif name.endswith("e_score_correction_bias"):
            t = torch.randn(shape, generator=g) * 0.01
        elif name.endswith("embed_tokens.weight"):
            t = torch.randn(shape, generator=g)
        else:  # linear [out, in]: keep activations O(1) through the depth
            t = torch.randn(shape, generator=g) * (shape[1] ** -0.5)
        out[name] = t.float()
    return out


def _fp8_eligible(name: str, t: torch.Tensor) -> bool:
    # Like the released FP8 checkpoints: projections in FP8; embeddings, head, router, norms not.
    return (
        t.dim() == 2
        and "embed_tokens" not in name
        and not name.startswith("lm_head")
        and not name.endswith("block_sparse_moe.gate.weight")
    )


def _added_ids(tok: Tokenizer) -> dict[str, int]:
    """M3's added tokens -> their ids in a tokenizers.Tokenizer that holds them all."""
    ids: dict[str, int] = {}
    for t in m3tokens.ALL_ADDED_TOKENS:
        i = tok.token_to_id(t)
        if i is None:
            raise ValueError(f"the tokenizer lacks M3's {t!r}")
        ids[t] = i
    return ids


def write_tokenizer(path: Path) -> dict[str, int]:
    """A byte-level tokenizer: 256 byte tokens, then M3's added tokens. Returns their ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(byte_chars))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in m3tokens.SPECIAL_TOKENS]
    )
    tok.add_tokens(
        [AddedToken(t, special=False, normalized=False) for t in m3tokens.NON_SPECIAL_ADDED_TOKENS]
    )
    tok.save(str(path / "tokenizer.json"))
    ids = _added_ids(tok)
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": m3tokens.BOS,
                "eos_token": m3tokens.EOS,
                "model_max_length": 524288,
                "added_tokens_decoder": {
                    str(i): {"content": t, "special": t in m3tokens.SPECIAL_TOKENS}
                    for t, i in ids.items()
                },
            },
            indent=2,
        )
    )
    return ids


def write_tokenizer_for_vocab(path: Path, vocab: int) -> dict[str, int]:
    """The bundled M3-style BPE (engine/m3/tokenizer.py) when the vocabulary holds it, else the
    byte-level one above (small vocabularies keep tiny models tiny)."""
    from tokenizers import Tokenizer

    from ...m3.tokenizer import default_tokenizer_path, write_tokenizer_files

    bundled = Tokenizer.from_file(str(default_tokenizer_path()))
    if vocab < bundled.get_vocab_size():
        return write_tokenizer(path)
    write_tokenizer_files(path)
    return _added_ids(bundled)


def init_tiny(path: str | Path, spec: TinySpec = TinySpec()) -> Path:
    from safetensors.torch import save_file

    p = Path(path)
    p.mkdir(parents=True, exist_ok=True)
    ids = write_tokenizer_for_vocab(p, spec.vocab)
    eos, bos = ids[m3tokens.EOS], ids[m3tokens.BOS]
    c = tiny_text_config(spec, eos, bos)
    weights = random_weights(c, spec.seed)
    tensors: dict[str, torch.Tensor] = {}
    for name, t in weights.items():
        if (spec.fp8 or spec.mxfp8) and _fp8_eligible(name, t):
            # both formats name the scale weight_scale_inv, as M3's released checkpoints do
            q, scale = quantize_mxfp8(t) if spec.mxfp8 else quantize_fp8(t)
            tensors[PREFIX + name] = q
            tensors[PREFIX + name + "_scale_inv"] = scale
        elif name.endswith(("block_sparse_moe.gate.weight", "e_score_correction_bias")):
            tensors[PREFIX + name] = t  # the router is fp32 in the checkpoint and in vLLM
        else:
            tensors[PREFIX + name] = t.to(torch.bfloat16)
    # Two shards and an index, as real checkpoints are laid out.
    names = sorted(tensors)
    half = len(names) // 2
    shards = [names[:half], names[half:]] if half else [names]
    weight_map = {}
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file(
            {n: tensors[n].contiguous() for n in part}, str(p / fname), metadata={"format": "pt"}
        )
        weight_map.update(dict.fromkeys(part, fname))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (p / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=1)
    )
    cfg = {
        "architectures": ["MiniMaxM3SparseForConditionalGeneration"],
        "model_type": "minimax_m3_vl",
        "torch_dtype": "bfloat16",
        "text_config": text_config_to_dict(c),
        "tie_word_embeddings": False,
    }
    if spec.fp8:
        cfg["quantization_config"] = {
            "quant_method": "fp8",
            "fmt": "e4m3",
            "activation_scheme": "dynamic",
            "weight_block_size": [128, 128],
        }
    if spec.mxfp8:
        cfg["quantization_config"] = {
            "quant_method": "modelopt",
            "quant_algo": "MXFP8",
            "group_size": 32,
        }
    (p / "config.json").write_text(json.dumps(cfg, indent=2))
    (p / "generation_config.json").write_text(
        json.dumps(
            {
                "bos_token_id": bos,
                "eos_token_id": eos,
                "do_sample": True,
                "temperature": 1.0,
                "top_p": 0.95,
            },
            indent=2,
        )
    )
    return p
