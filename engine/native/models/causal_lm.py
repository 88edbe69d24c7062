"""What the native decoder-only models share (llama.py, m3.py): the constructor every loader
calls the same way, the ModelInfo it reports, the op table resolved once, and the checks of the
lengths it is given."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Generic, Protocol, TypeVar

import torch
from torch import nn

from ..core.model_api import LayerCache, ModelInfo
from ..layers.build import Build
from ..layers.linear import FusedLayer


class _Config(Protocol):
    @property
    def vocab_size(self) -> int: ...
    @property
    def num_hidden_layers(self) -> int: ...
    @property
    def eos_token_id(self) -> tuple[int, ...]: ...
    @property
    def tie_word_embeddings(self) -> bool: ...


ConfigT = TypeVar("ConfigT", bound=_Config)


class CausalLM(nn.Module, Generic[ConfigT]):
    """Implements engine.native.model_api.NativeModel; a model adds its layers in `build`.

    `experts_device` places the routed experts elsewhere (the host, or "meta" until the offload
    placement fills them); a model without routed experts has nothing to place there.

    Each layer's forward body (fused or per-Linear) is chosen by `finalize`, at the end of the
    build and again by the loaders once the weights and the placement are in; forward never
    checks it again.
    """

    architecture: ClassVar[str]
    # Nothing in a decode step needs the host, so the runner may replay it from a CUDA graph.
    cuda_graphs: ClassVar[bool] = False

    def __init__(
        self,
        config: ConfigT,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        max_model_len: int | None = None,
        experts_device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        limit = self.position_limit(config)
        if max_model_len is not None and max_model_len > limit:
            raise ValueError(self.too_long(max_model_len, limit))
        self.info = ModelInfo(
            architecture=self.architecture,
            vocab_size=config.vocab_size,
            max_position_embeddings=max_model_len or limit,
            eos_token_ids=config.eos_token_id,
            dtype=dtype,
            cuda_graphs=self.cuda_graphs,
        )
        b = Build.resolve(dtype, device, experts_device)  # the op table, chosen once
        self.ops = b.ops
        self.build(config, b)
        self.finalize()

    def finalize(self) -> None:
        """Chooses, once for every layer, the body its forward runs (FusedLayer.finalize): the
        build's last step, and the loaders' after they copied the weights in and applied the
        placement. A parameter replaced by hand keeps the old choice until this runs again
        (then the layer takes its per-Linear body); `.to()` and friends run it themselves."""
        for m in self.modules():
            if isinstance(m, FusedLayer):
                m.finalize()

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> nn.Module:
        # model.to() / .half() / .cuda(): each parameter gets storage of its own, so the Linears
        # are no longer views of the fused tensors; choose the bodies again.
        super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        self.finalize()
        return self

    def position_limit(self, config: ConfigT) -> int:
        """The most positions this config serves."""
        raise NotImplementedError

    def too_long(self, max_model_len: int, limit: int) -> str:
        return f"max_model_len {max_model_len} exceeds the model's {limit} positions"

    def build(self, config: ConfigT, b: Build) -> None:
        raise NotImplementedError

    def check_caches(self, caches: list[LayerCache]) -> None:
        layers = self.config.num_hidden_layers
        if len(caches) != layers:
            raise ValueError(f"got {len(caches)} layer caches for {layers} layers")
