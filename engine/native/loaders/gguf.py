"""Llama-architecture GGUF files (llama.cpp) -> LlamaForCausalLM.

The `gguf` package reads the file; quantised tensors are dequantised to float32 with its
reference dequantisers. llama.cpp's converter permutes the rows of attn_q / attn_k so that
rotary pairs are interleaved; we undo that to get HF's NeoX half-split layout.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from ..models.llama import LlamaConfig, LlamaForCausalLM

if TYPE_CHECKING:
    from gguf import GGUFReader, ReaderTensor

_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def unpermute_rows(w: torch.Tensor, n_head: int) -> torch.Tensor:
    """Inverse of llama.cpp's `permute`: rows (head, half, pair) -> (head, pair, half)."""
    out = w.shape[0]
    return w.reshape(n_head, out // n_head // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _field(reader: GGUFReader, key: str, default: float | None = None) -> Any:
    """The field's value as the file holds it (an int, float, str or list), or `default`."""
    f = reader.fields.get(key)
    if f is None:
        return default
    return f.contents()


def _tensor(t: ReaderTensor) -> torch.Tensor:
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    shape = tuple(int(x) for x in reversed(t.shape))  # GGUF lists ne0 (innermost) first
    if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
        arr = np.asarray(t.data, dtype=np.float32)
    else:
        arr = dequantize(t.data, t.tensor_type)
    return torch.from_numpy(np.array(arr, dtype=np.float32, copy=True).reshape(shape))


def find_gguf(path: Path) -> Path:
    if path.is_file():
        return path
    files = sorted(path.glob("*.gguf"))
    if not files:
        raise ValueError(f"no .gguf file in {path}")
    if len(files) > 1:
        raise ValueError(
            f"{path} holds several .gguf files ({', '.join(f.name for f in files)}); pass one file"
        )
    return files[0]


def load_gguf(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    max_model_len: int | None = None,
) -> LlamaForCausalLM:
    from gguf import GGUFReader

    p = find_gguf(Path(path))
    try:
        reader = GGUFReader(str(p))
    except Exception as e:  # the reader raises ValueError/struct errors/OSError on bad files
        raise ValueError(f"cannot read GGUF file {p}: {e}") from None
    arch = _field(reader, "general.architecture")
    if arch != "llama":
        raise ValueError(f"unknown architecture {arch!r} in {p} (only 'llama' GGUF is supported)")
    tensors = {t.name: t for t in reader.tensors}
    heads = int(_field(reader, "llama.attention.head_count"))
    hidden = int(_field(reader, "llama.embedding_length"))
    embd = tensors["token_embd.weight"]
    eos = _field(reader, "tokenizer.ggml.eos_token_id")
    bos = _field(reader, "tokenizer.ggml.bos_token_id")
    c = LlamaConfig(
        vocab_size=int(embd.shape[1]),
        hidden_size=hidden,
        intermediate_size=int(_field(reader, "llama.feed_forward_length")),
        num_hidden_layers=int(_field(reader, "llama.block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(_field(reader, "llama.attention.head_count_kv", heads)),
        head_dim=int(_field(reader, "llama.attention.key_length", hidden // heads)),
        max_position_embeddings=int(_field(reader, "llama.context_length", 2048)),
        rope_theta=float(_field(reader, "llama.rope.freq_base", 10000.0)),
        rms_norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon", 1e-5)),
        tie_word_embeddings="output.weight" not in tensors,
        eos_token_id=() if eos is None else (int(eos),),
        bos_token_id=None if bos is None else int(bos),
    )
    model = LlamaForCausalLM(c, dtype=dtype, device=device, max_model_len=max_model_len)
    params = dict(model.named_parameters())
    seen: set[str] = set()
    for name, t in tensors.items():
        if name == "token_embd.weight":
            target = "model.embed_tokens.weight"
        elif name == "output_norm.weight":
            target = "model.norm.weight"
        elif name == "output.weight":
            target = "lm_head.weight"
        elif name.startswith("blk."):
            _, layer, kind, suffix = name.split(".", 3)
            if kind not in _LAYER_NAMES:
                continue  # e.g. rope_freqs: not used by plain Llama
            target = f"model.layers.{layer}.{_LAYER_NAMES[kind]}.{suffix}"
        else:
            continue
        w = _tensor(t)
        if name.endswith("attn_q.weight"):
            w = unpermute_rows(w, c.num_attention_heads)
        elif name.endswith("attn_k.weight"):
            w = unpermute_rows(w, c.num_key_value_heads)
        param = params.get(target)
        if param is None:
            raise ValueError(f"{p}: tensor {name} has no place in the model")
        if tuple(param.shape) != tuple(w.shape):
            raise ValueError(
                f"{p}: tensor {name} has shape {tuple(w.shape)}, the config "
                f"implies {tuple(param.shape)}"
            )
        param.data.copy_(w.to(dtype))
        seen.add(target)
    missing = sorted(set(params) - seen)
    if missing:
        raise ValueError(f"{p}: missing tensor(s) {', '.join(missing[:5])}")
    model.finalize()  # the weights are in: each layer's body, chosen once
    return model
