"""Placement applied at load: routed experts into host memory, everything else on the device.

The loader builds M3 with its routed experts on the meta device (no memory), loads every other
weight onto the GPU as usual, and hands each routed expert's three matrices to a
`HostExpertCollector`, which converts them one expert at a time into the host form
(`HostExpertLayer.from_weights`) and writes them into one preallocated tensor per field: the
peak stays one expert above the host form, never a layer in fp32. `attach()` then pins them
in place on CUDA (cudaHostRegister: torch's pinned allocator rounds each block up to a power
of two, up to 2x the RAM at 7 GiB per tensor) and hands the model its `OffloadRuntime`, whose
`place_experts` (the build's last step) makes each MoE block an `OffloadedMoE`.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from .config import OffloadConfig
from .cpu_experts import HostExpertLayer
from .device_experts import tensor_fields
from .pinning import pin_in_place
from .plan import ExpertForm
from .runtime import OffloadRuntime

if TYPE_CHECKING:
    from pathlib import Path

    from ..m3.config import M3TextConfig
    from ..native.models.m3 import M3ForCausalLM

EXPERT_PARAM = re.compile(
    r"^model\.layers\.(\d+)\.block_sparse_moe\.experts\.(\d+)\.(w[123])\.weight$"
)


class HostExpertCollector:
    """Routed-expert weights as the loader reads them -> one HostExpertLayer per MoE layer."""

    def __init__(self, num_experts: int, form: ExpertForm) -> None:
        self.num_experts, self.form = num_experts, form
        self._parts: dict[tuple[int, int], dict[str, torch.Tensor]] = {}
        self._layers: dict[int, dict[str, torch.Tensor]] = {}
        self._templates: dict[int, HostExpertLayer] = {}
        self._done: dict[int, set[int]] = {}

    def wants(self, name: str) -> bool:
        return EXPERT_PARAM.match(name) is not None

    def skips(self, name: str) -> bool:
        return False  # every expert tensor is read and handed over

    def add(self, name: str, w: torch.Tensor) -> None:
        m = EXPERT_PARAM.match(name)
        if m is None:
            raise ValueError(f"{name} is not a routed-expert weight")
        layer, e, which = int(m[1]), int(m[2]), m[3]
        part = self._parts.setdefault((layer, e), {})
        part[which] = w.float()
        if len(part) == 3:
            del self._parts[(layer, e)]
            self._put(layer, e, part)

    def _put(self, layer: int, e: int, part: dict[str, torch.Tensor]) -> None:
        one = HostExpertLayer.from_weights([part["w1"]], [part["w3"]], [part["w2"]], self.form)
        t = tensor_fields(one)
        dst = self._layers.get(layer)
        if dst is None:
            self._templates[layer] = one  # the form's sizes (hidden, inter, group)
            dst = self._layers[layer] = {
                k: torch.empty((self.num_experts, *v.shape[1:]), dtype=v.dtype)
                for k, v in t.items()
            }
        for k, v in t.items():
            dst[k][e].copy_(v[0])
        self._done.setdefault(layer, set()).add(e)

    def seen_names(self) -> list[str]:
        """Parameter names of every complete expert (the loader's missing-tensor check)."""
        return [
            f"model.layers.{i}.block_sparse_moe.experts.{e}.{w}.weight"
            for i, es in self._done.items()
            for e in es
            for w in ("w1", "w2", "w3")
        ]

    def layers(self) -> dict[int, HostExpertLayer]:
        out = {}
        for i, t in self._layers.items():
            if len(self._done[i]) != self.num_experts:
                raise ValueError(
                    f"layer {i}: {len(self._done[i])} of {self.num_experts} routed experts loaded"
                )
            fields: dict[str, Any] = dict(t)  # tensor fields only: the form stays
            out[i] = replace(self._templates[i], **fields)
        return out


class CachedExperts:
    """The loader's stand-in for HostExpertCollector when the experts come from the expert
    cache (expert_cache.py): the loader skips every routed-expert tensor, unread."""

    def __init__(self, layers: dict[int, HostExpertLayer], num_experts: int) -> None:
        self._layers, self.num_experts = layers, num_experts

    def wants(self, name: str) -> bool:
        return EXPERT_PARAM.match(name) is not None

    skips = wants

    def add(self, name: str, w: torch.Tensor) -> None:
        raise AssertionError("cached experts are never handed over by the loader")

    def seen_names(self) -> list[str]:
        return [
            f"model.layers.{i}.block_sparse_moe.experts.{e}.{w}.weight"
            for i in self._layers
            for e in range(self.num_experts)
            for w in ("w1", "w2", "w3")
        ]

    def layers(self) -> dict[int, HostExpertLayer]:
        return self._layers


def cached_expert_layers(
    model_dir: Path, config: M3TextConfig, cfg: OffloadConfig
) -> dict[int, HostExpertLayer]:
    """Every MoE layer's routed experts in the host form, memory-mapped from `cfg.cache_dir`;
    the layers missing there are converted from the checkpoint first (with progress)."""
    from .expert_cache import ExpertStore
    from .expert_source import CheckpointExperts, LayerExperts, checkpoint_fingerprint

    assert cfg.cache_dir is not None
    source = CheckpointExperts(model_dir, keep_mxfp8=cfg.form is ExpertForm.MXFP8)
    want = (config.intermediate_size, config.hidden_size)

    def checked(layer: int) -> LayerExperts:
        experts = source(layer)
        if experts.count != config.num_local_experts:
            raise ValueError(
                f"layer {layer} has {experts.count} routed experts, the config says "
                f"{config.num_local_experts}"
            )
        first = experts.read(0)
        gate = first[0]
        shape = tuple((gate[0] if isinstance(gate, tuple) else gate).shape)
        if shape != want:
            raise ValueError(
                f"layer {layer}: expert 0's w1 has shape {shape}, the config implies {want}"
            )
        # expert 0, read for this check, is not read again by the room check and conversion
        return LayerExperts(
            experts.count, lambda e: first if e == 0 else experts.read(e), experts.mx
        )

    moe = [i for i in range(config.num_hidden_layers) if config.is_moe_layer(i)]
    return ExpertStore.open(
        cfg.cache_dir, checkpoint_fingerprint(model_dir), cfg.form, moe, checked
    )


def attach(
    model: M3ForCausalLM,
    layers: dict[int, HostExpertLayer],
    cfg: OffloadConfig,
    device: torch.device | str,
) -> None:
    """Pins `layers` (CUDA) and makes the model run its routed experts over them: its MoE
    blocks become OffloadedMoE (M3ForCausalLM.place_experts, the build's last step) and
    model.offload the runtime."""
    device = torch.device(device)
    pinned = pin_in_place(layers) if device.type == "cuda" else []
    model.place_experts(OffloadRuntime(layers, cfg, device, model.config, pinned))
