"""Frames -> flat normalised patches in merge-window order, and back (SPEC §5.1 "patches").

One row per 14x14 patch, `C·T·P·P` = 1176 values (channel outermost, then the two frames of a
temporal pair, then pixel rows and columns). Rows run over temporal groups, then 2x2 merge
windows in raster order, then the 4 patches inside a window — the order the vision tower's
3D RoPE and its patch merger expect.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .config import MediaConfig


def _group_patches(group: np.ndarray, cfg: MediaConfig) -> np.ndarray:
    """[tp, H, W, 3] float32 (normalised) -> [gh*gw, 1176]."""
    tp, h, w, c = group.shape
    p, m = cfg.patch_size, cfg.merge_size
    gh, gw = h // p, w // p
    x = group.transpose(0, 3, 1, 2)  # tp, C, H, W
    x = x.reshape(tp, c, gh // m, m, p, gw // m, m, p)
    #     dims: tp0 C1 bh2 mh3 P4 bw5 mw6 P7  ->  bh bw mh mw C tp P P
    x = x.transpose(2, 5, 3, 6, 1, 0, 4, 7)
    return x.reshape(gh * gw, c * tp * p * p)


def frames_to_patches(frames: Sequence[np.ndarray], cfg: MediaConfig) -> np.ndarray:
    """uint8 RGB frames [H, W, 3] (all one size, sides multiples of 28) -> [N, 1176] float32.

    The frame count is padded to a multiple of the temporal patch size by repeating the last
    frame. Works one temporal group at a time so that a long video never holds a second
    full-size float copy.
    """
    if not frames:
        raise ValueError("no frames to patchify")
    h, w, _ = frames[0].shape
    if h % cfg.factor or w % cfg.factor:
        raise ValueError(f"frame size {w}x{h} is not a multiple of {cfg.factor}")
    tp = cfg.temporal_patch_size
    padded = list(frames) + [frames[-1]] * (-len(frames) % tp)
    per_group = (h // cfg.patch_size) * (w // cfg.patch_size)
    out = np.empty((len(padded) // tp * per_group, cfg.patch_dim), dtype=np.float32)
    scale = (1.0 / (255.0 * np.asarray(cfg.std, dtype=np.float32))).astype(np.float32)
    shift = np.asarray(cfg.mean, dtype=np.float32) / np.asarray(cfg.std, dtype=np.float32)
    for g in range(len(padded) // tp):
        group = np.stack(padded[g * tp : (g + 1) * tp]).astype(np.float32)
        group *= scale
        group -= shift.astype(np.float32)
        out[g * per_group : (g + 1) * per_group] = _group_patches(group, cfg)
    return out


def patches_to_frames(
    pixel_values: np.ndarray, grid_thw: tuple[int, int, int], cfg: MediaConfig
) -> np.ndarray:
    """The inverse: [N, 1176] -> uint8 [T*tp, H, W, 3] (padding frames included).

    Exact for values produced by `frames_to_patches` (normalisation is affine; rounding
    recovers the bytes). Backends that want pixels, not patches (vLLM), use this.
    """
    t, gh, gw = grid_thw
    p, m, tp = cfg.patch_size, cfg.merge_size, cfg.temporal_patch_size
    x = pixel_values.reshape(t, gh // m, gw // m, m, m, 3, tp, p, p)
    # t bh bw mh mw C tp P P  ->  t tp bh mh P bw mw P C
    x = x.transpose(0, 6, 1, 3, 7, 2, 4, 8, 5).reshape(t * tp, gh * p, gw * p, 3)
    std = np.asarray(cfg.std, dtype=np.float32)
    mean = np.asarray(cfg.mean, dtype=np.float32)
    # numpy's stubs type this chain Any; it is the uint8 frames array
    frames: np.ndarray = np.clip(np.rint((x * std + mean) * 255.0), 0, 255).astype(np.uint8)
    return frames
