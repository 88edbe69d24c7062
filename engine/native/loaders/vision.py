"""Vision-tower weights: load them from a VL checkpoint, or write random ones into a tiny one.

Checkpoint names (SPEC §1.7): `vision_tower.vision_model.*` (the ViT), and top-level
`multi_modal_projector.*` / `patch_merge_mlp.*`; vLLM maps the latter two under
`vision_tower.` and `.mlp.fc1/2` to `.fc1/2`. Our module keeps the HF names, so the only
mapping is dropping the `vision_tower.` prefix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from ..models.m3_vision import M3VisionTower, VisionConfig

VISION_FILE = "vision.safetensors"
_PREFIXES = ("vision_tower.", "multi_modal_projector.", "patch_merge_mlp.")


def has_vision_weights(model_dir: Path) -> bool:
    """Whether any safetensors file of the checkpoint holds vision weights (headers only)."""
    from safetensors import safe_open

    for shard in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            if any(k.removeprefix("model.").startswith(_PREFIXES) for k in f.keys()):
                return True
    return False


def wants_vision(model_dir: Path) -> bool:
    """config.json has a vision_config and the weights are there: load the tower."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError):
        return False  # the text loader reports a broken config.json itself
    return isinstance(config.get("vision_config"), dict) and has_vision_weights(model_dir)


def _module_name(ckpt_name: str) -> str | None:
    name = ckpt_name.removeprefix("model.")  # newer HF exports nest everything under model.
    if name.startswith("vision_tower."):
        name = name[len("vision_tower.") :]
        return (
            name
            if name.startswith(("vision_model.", "multi_modal_projector.", "patch_merge_mlp."))
            else None
        )
    return name if name.startswith(_PREFIXES[1:]) else None


def _shards(d: Path) -> list[Path]:
    index = d / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text()).get("weight_map", {}).values()))
        return [d / n for n in names]
    return sorted(d.glob("*.safetensors"))


def load_vision_tower(
    checkpoint_dir: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> M3VisionTower:
    """Build the tower from config.json's vision_config and fill it from the safetensors."""
    from safetensors import safe_open

    d = Path(checkpoint_dir)
    cfg = VisionConfig.from_hf(json.loads((d / "config.json").read_text()))
    tower = M3VisionTower(cfg)
    params = dict(tower.named_parameters())
    seen: set[str] = set()
    for shard in _shards(d):
        with safe_open(str(shard), framework="pt") as f:
            for key in f.keys():
                name = _module_name(key)
                if name is None:
                    continue
                if name not in params:
                    if "post_layernorm" in name:
                        continue  # the released checkpoint has none; never applied (SPEC §1.9)
                    raise ValueError(f"{shard.name}: unexpected vision weight {key}")
                t = f.get_tensor(key)
                if tuple(t.shape) != tuple(params[name].shape):
                    raise ValueError(
                        f"{shard.name}: {key} has shape {tuple(t.shape)}, "
                        f"expected {tuple(params[name].shape)}"
                    )
                with torch.no_grad():
                    params[name].copy_(t.float())
                seen.add(name)
    missing = sorted(set(params) - seen)
    if missing:
        raise ValueError(f"{d}: {len(missing)} vision weights missing, e.g. {missing[0]}")
    return tower.to(dtype=dtype, device=device).eval()


# The released tower (SPEC §1.2, third-party figures): a ~600M-parameter ViT.
RELEASE_VISION: dict[str, Any] = {
    "hidden_size": 1280,
    "num_attention_heads": 16,
    "num_hidden_layers": 32,
    "intermediate_size": 5120,
    "layer_norm_eps": 1e-5,
    "patch_size": 14,
    "num_channels": 3,
    "img_token_compression_config": {"spatial_merge_size": 2, "temporal_patch_size": 2},
    "hidden_act": "gelu",
    "projector_hidden_act": "gelu",
    "rope_theta": 10000.0,
    "multimodal_projector_bias": True,
    "patch_merge_bias": True,
}


def tiny_vision_config(text_hidden: int) -> dict[str, Any]:
    """The released tower's fields at test size (head_dim 16: 12 of 16 dims rotate)."""
    small = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}
    return {**RELEASE_VISION, **small, "intermediate_size": 128}


def random_vision_tensors(
    vision_config: dict[str, Any], text_hidden: int, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Random BF16 vision weights under the checkpoint's names, for a `vision_config`."""
    cfg = VisionConfig.from_hf({"vision_config": vision_config, "hidden_size": text_hidden})
    g = torch.Generator().manual_seed(seed)
    tensors: dict[str, torch.Tensor] = {}
    for name, p in M3VisionTower(cfg).named_parameters():
        if name.endswith("bias"):
            t = torch.randn(p.shape, generator=g) * 0.02
        elif p.dim() == 1:  # LayerNorm weight
            t = 1.0 + torch.randn(p.shape, generator=g) * 0.02
        else:  # fan-in scaled so activations stay O(1)
            t = torch.randn(p.shape, generator=g) * (p[0].numel() ** -0.5)
        key = name if name.startswith(_PREFIXES[1:]) else "vision_tower." + name
        tensors[key] = t.to(torch.bfloat16).contiguous()
    return tensors


def write_random_vision_weights(
    checkpoint_dir: str | Path, vision_config: dict[str, Any] | None = None, seed: int = 0
) -> Path:
    """Add `vision_config` to config.json and random vision weights (bf16) as their own shard.

    The shard is registered in model.safetensors.index.json when the checkpoint has one.
    """
    from safetensors.torch import save_file

    d = Path(checkpoint_dir)
    config = json.loads((d / "config.json").read_text())
    text_hidden = (config.get("text_config") or config)["hidden_size"]
    config["vision_config"] = vision_config or tiny_vision_config(text_hidden)
    tensors = random_vision_tensors(config["vision_config"], text_hidden, seed)
    save_file(tensors, str(d / VISION_FILE), metadata={"format": "pt"})
    index = d / "model.safetensors.index.json"
    if index.exists():
        idx = json.loads(index.read_text())
        idx.setdefault("weight_map", {}).update(dict.fromkeys(tensors, VISION_FILE))
        index.write_text(json.dumps(idx, indent=1))
    (d / "config.json").write_text(json.dumps(config, indent=2))
    return d / VISION_FILE
