"""load_model(path) -> NativeModel.

* a directory with config.json and *.safetensors (single file or an index json): MiniMax M3
  (VL layout `language_model.model.layers.N...` or text layout `model.layers.N...`) or a HF
  Llama, loaded by the checkpoint's own weight names. `mtp.` weights and the vision tower are
  skipped. FP8 e4m3 weights with 128x128 block scales (`weight_scale_inv`) are dequantised.
* a `.gguf` file, or a directory holding one: a Llama model (gguf_loader.py).

Every failure is a ValueError whose message names the file or tensor at fault.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ...json_file import read_json_object as _read_json
from ...m3.config import parse_config
from ...safetensors_meta import read_header
from ..models.llama import LlamaConfig, LlamaForCausalLM
from ..models.m3 import M3ForCausalLM
from .fp8 import dequantize_fp8, dequantize_mxfp8, is_mx_scale
from .gguf import load_gguf
from .shards import iter_tensors, safetensors_files

if TYPE_CHECKING:
    from ...offload.config import OffloadConfig
    from ...offload.placement import CachedExperts, HostExpertCollector

log = logging.getLogger(__name__)
_SKIP_PREFIXES = ("vision_tower.", "multi_modal_projector.", "patch_merge_mlp.")
_M3_TYPES = {"minimax_m3_vl", "minimax_m3_text", "minimax_m3"}
_M3_ARCHS = {"MiniMaxM3SparseForConditionalGeneration", "MiniMaxM3SparseForCausalLM"}


def _checkpoint_to_param(name: str) -> str | None:
    """Checkpoint weight name -> our parameter name, or None to skip it."""
    if name.startswith("language_model."):
        name = name[len("language_model.") :]
    if name.startswith(_SKIP_PREFIXES) or "mtp." in name:
        return None
    return name


def _load_safetensors(
    model: M3ForCausalLM | LlamaForCausalLM,
    files: list[Path],
    dtype: torch.dtype,
    progress: Callable[[int, int], None] | None = None,
    experts: HostExpertCollector | CachedExperts | None = None,  # routed experts go to it
) -> None:
    params = dict(model.named_parameters())
    # Bytes read of the files' total (skipped tensors, e.g. a vision tower, are never read:
    # the last report says all of it).
    total = sum(f.stat().st_size for f in files)
    done = 0
    tied = model.config.tie_word_embeddings
    handles: dict[str, tuple[Any, Path]] = {}
    for name, h, f in iter_tensors(files):
        handles[name] = (h, f)
    seen: set[str] = set()
    unexpected: list[str] = []
    for name, (h, f) in handles.items():
        if name.endswith((".weight_scale_inv", ".weight_scale")):
            continue  # consumed with its weight
        target = _checkpoint_to_param(name)
        if target is None:
            continue
        if experts is not None and experts.skips(target):
            continue  # in host memory already (the expert cache)
        param = params.get(target)
        if param is None:
            if not (tied and target == "lm_head.weight"):
                unexpected.append(name)
            continue
        try:
            w = h.get_tensor(name)
        except Exception as e:
            raise ValueError(f"corrupt safetensors file {f}: cannot read {name}: {e}") from None
        done += w.numel() * w.element_size()  # as stored in the file
        if w.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            base = name[: -len("weight")]
            sname = next(
                (base + s for s in ("weight_scale_inv", "weight_scale") if base + s in handles),
                None,
            )
            if sname is None:
                raise ValueError(f"{f.name}: FP8 tensor {name} has no weight_scale_inv")
            sh, sf = handles[sname]
            try:
                scale = sh.get_tensor(sname)
                w = dequantize_mxfp8(w, scale) if is_mx_scale(scale) else dequantize_fp8(w, scale)
            except ValueError as e:
                raise ValueError(f"{sf.name}: {sname}: {e}") from None
        if tuple(w.shape) != tuple(param.shape):
            raise ValueError(
                f"{f.name}: tensor {name} has shape {tuple(w.shape)}, the config "
                f"implies {tuple(param.shape)}"
            )
        if experts is not None and experts.wants(target):
            experts.add(target, w)  # into host memory, in the host form
        else:
            param.data.copy_(w.to(param.dtype))
            seen.add(target)
        if progress is not None:
            progress(min(done, total), total)
    if unexpected:  # vLLM ignores weights it has no parameter for; say so, don't fail
        log.warning(
            "ignored %d checkpoint tensor(s) the model has no place for, e.g. %s",
            len(unexpected),
            ", ".join(unexpected[:3]),
        )
    if experts is not None:
        seen.update(experts.seen_names())
    missing = sorted(set(params) - seen)
    if missing:
        more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
        raise ValueError(f"checkpoint is missing tensor(s) {', '.join(missing[:5])}{more}")
    if progress is not None:
        progress(total, total)


def _is_m3(cfg: dict[str, Any]) -> bool:
    return cfg.get("model_type") in _M3_TYPES or bool(
        set(cfg.get("architectures") or ()) & _M3_ARCHS
    )


def _eos_ids(p: Path, cfg: dict[str, Any]) -> tuple[int, ...]:
    gen = p / "generation_config.json"
    for src in (_read_json(gen) if gen.exists() else {}, cfg):
        eos = src.get("eos_token_id")
        if eos is not None:
            return tuple(int(x) for x in eos) if isinstance(eos, list) else (int(eos),)
    return ()


def load_model(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    max_model_len: int | None = None,
    rope_scaling: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    offload: OffloadConfig | None = None,
) -> M3ForCausalLM | LlamaForCausalLM:
    """Build and fill a NativeModel from a checkpoint directory or GGUF file.

    rope_scaling overrides the config's (e.g. {"rope_type": "yarn", "factor": 2.0} for 1M).
    progress(bytes done, bytes total) after each tensor (safetensors only, not GGUF).
    offload (engine.offload.placement.OffloadConfig, M3 only): the routed experts go to host
    memory in that form and run on the CPU; everything else loads onto `device`."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"model path {p} does not exist")
    if p.suffix == ".gguf" or (
        p.is_dir() and not (p / "config.json").exists() and any(p.glob("*.gguf"))
    ):
        return load_gguf(p, device=device, dtype=dtype, max_model_len=max_model_len)
    if not p.is_dir():
        raise ValueError(f"{p} is neither a checkpoint directory nor a .gguf file")
    cfg = _read_json(p / "config.json")
    files = safetensors_files(p)
    model: M3ForCausalLM | LlamaForCausalLM
    if _is_m3(cfg):
        text = parse_config(cfg, rope_scaling).text_config
        if not text.eos_token_id:  # the VL layout keeps it at the top or in generation_config
            eos = _eos_ids(p, cfg)
            text = replace(text, eos_token_id=eos) if eos else text
        model = M3ForCausalLM(
            text,
            dtype=dtype,
            device=device,
            max_model_len=max_model_len,
            experts_device="meta" if offload is not None else None,
        )
    elif cfg.get("model_type") == "llama" or "LlamaForCausalLM" in (cfg.get("architectures") or ()):
        try:
            lc = LlamaConfig.from_hf(cfg)
        except KeyError as e:
            raise ValueError(f"{p / 'config.json'}: missing field {e}") from None
        model = LlamaForCausalLM(lc, dtype=dtype, device=device, max_model_len=max_model_len)
    else:
        raise ValueError(
            f"unknown architecture in {p / 'config.json'}: model_type "
            f"{cfg.get('model_type')!r}, architectures {cfg.get('architectures')}"
        )
    if offload is None:
        _load_safetensors(model, files, dtype, progress)
        model.finalize()  # the weights are in: each layer's body, chosen once
        return model.eval()
    if not isinstance(model, M3ForCausalLM):
        raise ValueError("expert offload is for MiniMax M3 checkpoints (this one has no MoE)")
    from ...offload.placement import (
        CachedExperts,
        HostExpertCollector,
        attach,
        cached_expert_layers,
    )

    collector: HostExpertCollector | CachedExperts
    if offload.cache_dir is not None:
        layers = cached_expert_layers(p, model.config, offload)
        collector = CachedExperts(layers, model.config.num_local_experts)
    else:
        collector = HostExpertCollector(model.config.num_local_experts, offload.form)
    _load_safetensors(model, files, dtype, progress, collector)
    attach(model, collector.layers(), offload, device)  # finalizes the model again
    return model.eval()


def checkpoint_info(path: str | Path) -> dict[str, Any]:
    """What `m3agent model info` prints; reads headers only, never the weights."""
    from collections import Counter
    from math import prod

    p = Path(path)
    if not p.exists():
        raise ValueError(f"model path {p} does not exist")
    if p.suffix == ".gguf" or (p.is_dir() and not (p / "config.json").exists()):
        from gguf import GGUFReader

        from .gguf import find_gguf

        g = find_gguf(p)
        r = GGUFReader(str(g))
        arch = r.fields["general.architecture"].contents()
        types = Counter(t.tensor_type.name for t in r.tensors)
        return {
            "path": str(g),
            "format": "gguf",
            "architecture": arch,
            "layers": r.fields[f"{arch}.block_count"].contents(),
            "hidden_size": r.fields[f"{arch}.embedding_length"].contents(),
            "params": int(sum(int(t.n_elements) for t in r.tensors)),
            "dtype": dict(types),
        }
    cfg = _read_json(p / "config.json")
    params, skipped = 0, 0
    dtypes: Counter[str] = Counter()
    for f in safetensors_files(p):
        for name, meta in read_header(f).items():
            if name.endswith(("weight_scale_inv", "weight_scale")):
                continue
            if _checkpoint_to_param(name) is None:
                skipped += 1
                continue
            params += prod(meta["shape"])
            dtypes[meta["dtype"]] += 1
    info: dict[str, Any] = {
        "path": str(p),
        "format": "safetensors",
        "params": params,
        "dtype": dict(dtypes),
        "skipped_tensors": skipped,
    }
    if _is_m3(cfg):
        c = parse_config(cfg).text_config
        info.update(
            architecture="minimax_m3",
            layers=c.num_hidden_layers,
            hidden_size=c.hidden_size,
            heads=f"{c.num_attention_heads}q/{c.num_key_value_heads}kv x {c.head_dim}",
            msa_layers=sum(c.is_sparse_layer(i) for i in range(c.num_hidden_layers)),
            moe_layers=sum(c.is_moe_layer(i) for i in range(c.num_hidden_layers)),
            experts=f"{c.num_local_experts} (top {c.num_experts_per_tok})",
            max_positions=c.max_model_len,
            vocab_size=c.vocab_size,
            quantization=(cfg.get("quantization_config") or {}).get("quant_method"),
        )
    else:
        info.update(
            architecture=cfg.get("model_type"),
            layers=cfg.get("num_hidden_layers"),
            hidden_size=cfg.get("hidden_size"),
            vocab_size=cfg.get("vocab_size"),
        )
    return info
