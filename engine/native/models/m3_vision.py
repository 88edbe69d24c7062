"""The M3 vision tower (SPEC §1.9): CLIP-style ViT with partial 3D RoPE, projector, 2x2 merger.

Order of operations, as vLLM's `MiniMaxVLVisionModel`: Conv3d patch embed (no bias) ->
pre-LayerNorm -> CLIP blocks (biased QKV, full attention within each image / video segment,
partial NeoX 3D RoPE on t|h|w bands) -> *no* post-LayerNorm -> per-patch projector
(vision -> text hidden) -> concat 4 patches of each 2x2 window -> merger MLP. Module names
follow the checkpoint (`vision_model.*`, `multi_modal_projector.*`, `patch_merge_mlp.*`).
Input rows must be in merge-window order, as `m3agent.engine.m3.media` produces them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import nn

_ACTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": lambda x: F.gelu(x),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "quick_gelu": lambda x: x * torch.sigmoid(1.702 * x),
}


@dataclass(frozen=True, slots=True)
class VisionConfig:
    hidden_size: int
    num_attention_heads: int
    num_hidden_layers: int
    intermediate_size: int
    text_hidden_size: int
    projector_hidden_size: int | None = None  # None: the text hidden size
    layer_norm_eps: float = 1e-5
    patch_size: int = 14
    num_channels: int = 3
    spatial_merge_size: int = 2
    temporal_patch_size: int = 2
    hidden_act: str = "gelu"
    projector_hidden_act: str = "gelu"
    rope_theta: float = 10000.0
    vision_segment_max_frames: int | None = None
    multimodal_projector_bias: bool = True
    patch_merge_bias: bool = True

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("vision_config: hidden_size must divide by num_attention_heads")
        for act in (self.hidden_act, self.projector_hidden_act):
            if act not in _ACTS:
                raise ValueError(f"vision_config: unsupported activation {act!r}")
        if self.vision_segment_max_frames is not None and self.vision_segment_max_frames < 1:
            raise ValueError("vision_config: vision_segment_max_frames must be >= 1")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def axis_dim(self) -> int:
        """Rotated dims per axis: 2*((rope_dims//3)//2) (26 for head_dim 80, so 78 rotate)."""
        return 2 * ((2 * (self.head_dim // 2) // 3) // 2)

    @classmethod
    def from_hf(cls, config: dict[str, Any]) -> VisionConfig:
        """From a VL checkpoint's top-level config.json (vision_config + text hidden size)."""
        v = config.get("vision_config")
        if not isinstance(v, dict):
            raise ValueError("config.json has no vision_config: not a vision-language checkpoint")
        text = config.get("text_config") or config
        comp = v.get("img_token_compression_config") or {}
        return cls(
            hidden_size=v["hidden_size"],
            num_attention_heads=v["num_attention_heads"],
            num_hidden_layers=v["num_hidden_layers"],
            intermediate_size=v["intermediate_size"],
            text_hidden_size=text["hidden_size"],
            projector_hidden_size=config.get("projector_hidden_size"),
            layer_norm_eps=v.get("layer_norm_eps", 1e-5),
            patch_size=v.get("patch_size", 14),
            num_channels=v.get("num_channels", 3),
            spatial_merge_size=comp.get("spatial_merge_size", 2),
            temporal_patch_size=comp.get("temporal_patch_size", 2),
            hidden_act=v.get("hidden_act", "gelu"),
            projector_hidden_act=v.get("projector_hidden_act", "gelu"),
            rope_theta=v.get("rope_theta", 10000.0),
            vision_segment_max_frames=v.get("vision_segment_max_frames"),
            multimodal_projector_bias=v.get("multimodal_projector_bias", True),
            patch_merge_bias=v.get("patch_merge_bias", True),
        )


def split_segments(
    grid_thw: Sequence[Sequence[int]], max_frames: int | None
) -> list[tuple[int, int, int]]:
    """Grids cut into segments of at most `max_frames` temporal groups (t restarts at 0)."""
    out: list[tuple[int, int, int]] = []
    for t, h, w in grid_thw:
        if max_frames is None or t <= max_frames:
            out.append((t, h, w))
        else:
            out += [(min(max_frames, t - i), h, w) for i in range(0, t, max_frames)]
    return out


def rope_cos_sin(
    cfg: VisionConfig,
    segments: Sequence[tuple[int, int, int]],
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 cos/sin [N, 3*axis/2]: columns are the t band, then h, then w (NeoX halves)."""
    a, m = cfg.axis_dim, cfg.spatial_merge_size
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, a, 2, dtype=torch.float32, device=device) / a))
    pos = []
    for t, h, w in segments:
        # merge-window order: frame, window row, window col, row in window, col in window
        tt = torch.arange(t, device=device).view(t, 1, 1, 1, 1)
        hh = torch.arange(h // m, device=device).view(1, -1, 1, 1, 1) * m + torch.arange(
            m, device=device
        ).view(1, 1, 1, m, 1)
        ww = torch.arange(w // m, device=device).view(1, 1, -1, 1, 1) * m + torch.arange(
            m, device=device
        ).view(1, 1, 1, 1, m)
        shape = (t, h // m, w // m, m, m)
        pos.append(torch.stack([x.expand(shape).reshape(-1) for x in (tt, hh, ww)], dim=-1))
    p = torch.cat(pos).to(torch.float32)  # [N, 3]
    freqs = torch.cat([p[:, i : i + 1] * inv[None, :] for i in range(3)], dim=-1)
    return freqs.cos(), freqs.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [N, heads, head_dim]; rotate the first 2*half dims NeoX style, keep the rest."""
    half = cos.shape[-1]
    xf = x.float()
    x1, x2, rest = xf[..., :half], xf[..., half : 2 * half], xf[..., 2 * half :]
    c, s = cos[:, None, :], sin[:, None, :]
    out = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s, rest], dim=-1)
    return out.to(x.dtype)


class VisionAttention(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        d = cfg.hidden_size
        self.heads, self.head_dim = cfg.num_attention_heads, cfg.head_dim
        self.q_proj, self.k_proj = nn.Linear(d, d), nn.Linear(d, d)
        self.v_proj, self.out_proj = nn.Linear(d, d), nn.Linear(d, d)

    def forward(
        self, x: torch.Tensor, cu_seqlens: list[int], cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        n = x.shape[0]
        q = apply_rope(self.q_proj(x).view(n, self.heads, self.head_dim), cos, sin)
        k = apply_rope(self.k_proj(x).view(n, self.heads, self.head_dim), cos, sin)
        v = self.v_proj(x).view(n, self.heads, self.head_dim)
        out = torch.empty_like(q)
        for a, b in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True):
            # full (non-causal) attention inside one image / video segment only
            o = F.scaled_dot_product_attention(
                q[a:b].transpose(0, 1), k[a:b].transpose(0, 1), v[a:b].transpose(0, 1)
            )
            out[a:b] = o.transpose(0, 1)
        return cast(torch.Tensor, self.out_proj(out.reshape(n, -1)))  # nn.Linear's call: Any


class VisionMLP(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.fc2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.act = _ACTS[cfg.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(torch.Tensor, self.fc2(self.act(self.fc1(x))))  # nn.Linear's call: Any

    if TYPE_CHECKING:  # for mypy only: nn.Module.__call__ (which runs forward) returns Any

        def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


class VisionEncoderLayer(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.layer_norm1 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.self_attn = VisionAttention(cfg)
        self.layer_norm2 = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = VisionMLP(cfg)

    def forward(
        self, x: torch.Tensor, cu_seqlens: list[int], cos: torch.Tensor, sin: torch.Tensor
    ) -> torch.Tensor:
        x = x + self.self_attn(self.layer_norm1(x), cu_seqlens, cos, sin)
        return x + self.mlp(self.layer_norm2(x))


class _Embeddings(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        k = (cfg.temporal_patch_size, cfg.patch_size, cfg.patch_size)
        self.patch_embedding = nn.Conv3d(cfg.num_channels, cfg.hidden_size, k, k, bias=False)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        # kernel == stride == the whole patch, so the Conv3d is one matmul per row
        w = self.patch_embedding.weight
        return pixel_values.to(w.dtype) @ w.view(w.shape[0], -1).t()


class _Encoder(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.layers = nn.ModuleList(VisionEncoderLayer(cfg) for _ in range(cfg.num_hidden_layers))


class VisionTransformer(nn.Module):
    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.cfg = cfg
        self.embeddings = _Embeddings(cfg)
        self.pre_layrnorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)  # HF spelling
        self.encoder = _Encoder(cfg)

    def forward(
        self, pixel_values: torch.Tensor, grid_thw: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        segs = split_segments(grid_thw, self.cfg.vision_segment_max_frames)
        cu = [0]
        for t, h, w in segs:
            cu.append(cu[-1] + t * h * w)
        if cu[-1] != pixel_values.shape[0]:
            raise ValueError(
                f"grid_thw covers {cu[-1]} patches, pixel_values has {pixel_values.shape[0]}"
            )
        cos, sin = rope_cos_sin(self.cfg, segs, pixel_values.device)
        x: torch.Tensor = self.pre_layrnorm(self.embeddings(pixel_values))  # nn.Module calls: Any
        for layer in self.encoder.layers:
            x = layer(x, cu, cos, sin)
        return x  # no post-LayerNorm: the checkpoint has none


class _TwoLayerMLP(nn.Module):
    def __init__(self, d_in: int, d_mid: int, d_out: int, bias: bool, act: str):
        super().__init__()
        self.linear_1 = nn.Linear(d_in, d_mid, bias=bias)
        self.linear_2 = nn.Linear(d_mid, d_out, bias=bias)
        self.act = _ACTS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cast(
            torch.Tensor, self.linear_2(self.act(self.linear_1(x)))
        )  # nn.Linear's call: Any

    if TYPE_CHECKING:  # for mypy only: nn.Module.__call__ (which runs forward) returns Any

        def __call__(self, x: torch.Tensor) -> torch.Tensor: ...


class M3VisionTower(nn.Module):
    """pixel_values [N, 1176] + grid_thw -> [N/4, text_hidden] embeddings, one per placeholder."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.cfg = cfg
        mid = cfg.projector_hidden_size or cfg.text_hidden_size
        m2 = cfg.spatial_merge_size**2
        self.vision_model = VisionTransformer(cfg)
        self.multi_modal_projector = _TwoLayerMLP(
            cfg.hidden_size,
            mid,
            cfg.text_hidden_size,
            cfg.multimodal_projector_bias,
            cfg.projector_hidden_act,
        )
        self.patch_merge_mlp = _TwoLayerMLP(
            cfg.text_hidden_size * m2,
            mid,
            cfg.text_hidden_size,
            cfg.patch_merge_bias,
            cfg.projector_hidden_act,
        )

    def forward(
        self, pixel_values: torch.Tensor, grid_thw: Sequence[Sequence[int]]
    ) -> torch.Tensor:
        x = self.vision_model(pixel_values, grid_thw)
        x = self.multi_modal_projector(x)  # per patch, *before* merging (weights force it)
        m2 = self.cfg.spatial_merge_size**2
        return self.patch_merge_mlp(x.reshape(x.shape[0] // m2, -1))


def merge_vision_embeddings(
    input_embeds: torch.Tensor,
    input_ids: torch.Tensor,
    vision_embeds: torch.Tensor,
    image_token_id: int,
    video_token_id: int,
) -> torch.Tensor:
    """Put vision rows, in order, at the image/video placeholder positions; others untouched.

    The wrapper (start/end) and timestamp tokens keep their text embeddings. A chunk of a
    prompt passes only the rows of the placeholders it holds (`placeholder_rows`).
    """
    mask = (input_ids == image_token_id) | (input_ids == video_token_id)
    n = int(mask.sum())
    if n != vision_embeds.shape[0]:
        raise ValueError(
            f"{n} image/video placeholder tokens but {vision_embeds.shape[0]} vision embeddings"
        )
    if n == 0:
        return input_embeds
    out = input_embeds.clone()
    out[mask] = vision_embeds.to(out.dtype)
    return out


def placeholder_rows(
    prompt_ids: Sequence[int], start: int, end: int, image_token_id: int, video_token_id: int
) -> tuple[int, int]:
    """[a, b): the vision rows that belong to prompt positions [start, end) (chunked prefill)."""
    ph = {image_token_id, video_token_id}
    a = sum(1 for t in prompt_ids[:start] if t in ph)
    return a, a + sum(1 for t in prompt_ids[start:end] if t in ph)
