"""The vision tower: Conv3d equivalence, partial 3D RoPE, segments, projector-then-merger, loader."""

from __future__ import annotations

import json

import pytest
import torch
from m3agent.engine.native.loaders.vision import load_vision_tower, write_random_vision_weights
from m3agent.engine.native.models.m3_vision import (
    M3VisionTower,
    VisionConfig,
    apply_rope,
    merge_vision_embeddings,
    rope_cos_sin,
)
from torch import nn

CFG = VisionConfig(
    hidden_size=48,
    num_attention_heads=3,
    num_hidden_layers=2,
    intermediate_size=64,
    text_hidden_size=32,
)


def test_rotated_dims_match_spec():
    big = VisionConfig(
        hidden_size=1280,
        num_attention_heads=16,
        num_hidden_layers=1,
        intermediate_size=8,
        text_hidden_size=8,
    )
    assert big.head_dim == 80 and 3 * big.axis_dim == 78
    cos, sin = rope_cos_sin(big, [(1, 4, 4)])
    assert cos.shape == (16, 39)
    x = torch.randn(16, 2, 80)
    y = apply_rope(x, cos, sin)
    torch.testing.assert_close(y[..., 78:], x[..., 78:])  # the last 2 dims never rotate
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))  # a rotation


def test_rope_positions_in_merge_window_order():
    cos, sin = rope_cos_sin(CFG, [(2, 4, 6)])
    a = CFG.axis_dim // 2
    inv = 1.0 / (CFG.rope_theta ** (torch.arange(0, CFG.axis_dim, 2).float() / CFG.axis_dim))
    r = 0
    for t in range(2):
        for bh in range(2):
            for bw in range(3):
                for mh in range(2):
                    for mw in range(2):
                        h, w = 2 * bh + mh, 2 * bw + mw
                        want = torch.cat([t * inv, h * inv, w * inv])
                        torch.testing.assert_close(cos[r], want.cos())
                        torch.testing.assert_close(sin[r, 2 * a :], (w * inv).sin())
                        r += 1


def test_patch_embed_is_the_conv3d():
    tower = M3VisionTower(CFG)
    conv: nn.Conv3d = tower.vision_model.embeddings.patch_embedding
    pv = torch.randn(10, 1176)
    want = conv(pv.view(10, 3, 2, 14, 14)).view(10, -1)
    torch.testing.assert_close(tower.vision_model.embeddings(pv), want, rtol=1e-4, atol=1e-4)


def test_segments_do_not_see_each_other_and_shapes():
    torch.manual_seed(0)
    tower = M3VisionTower(CFG).eval()
    a, b = torch.randn(16, 1176), torch.randn(2 * 24, 1176)
    out = tower(torch.cat([a, b]), [(1, 4, 4), (2, 4, 6)])
    assert out.shape == (4 + 12, 32)
    out2 = tower(torch.cat([a, torch.randn_like(b)]), [(1, 4, 4), (2, 4, 6)])
    torch.testing.assert_close(out[:4], out2[:4])
    assert not torch.allclose(out[4:], out2[4:])
    # with segments of 1 temporal group, each group of the video restarts at t = 0
    seg = M3VisionTower(VisionConfig(**{**_kw(CFG), "vision_segment_max_frames": 1})).eval()
    seg.load_state_dict(tower.state_dict())
    two = seg(b, [(2, 4, 6)])
    torch.testing.assert_close(two[:6], seg(b[:24], [(1, 4, 6)]))
    torch.testing.assert_close(two[6:], seg(b[24:], [(1, 4, 6)]))


def test_projector_runs_before_merger():
    torch.manual_seed(0)
    tower = M3VisionTower(CFG).eval()
    pv = torch.randn(16, 1176)
    hidden = tower.vision_model(pv, [(1, 4, 4)])
    assert hidden.shape == (16, 48)
    proj = tower.multi_modal_projector(hidden)  # [16, text 32]
    want = tower.patch_merge_mlp(proj.reshape(4, 4 * 32))
    torch.testing.assert_close(tower(pv, [(1, 4, 4)]), want)
    assert tower.patch_merge_mlp.linear_1.in_features == 4 * 32


def _kw(cfg: VisionConfig) -> dict:
    return {f: getattr(cfg, f) for f in cfg.__slots__}


def test_merge_vision_embeddings():
    ids = torch.tensor([5, 9, 7, 7, 9, 8, 8, 9])
    emb = torch.zeros(8, 4)
    vis = torch.arange(16.0).view(4, 4)
    out = merge_vision_embeddings(emb, ids, vis, image_token_id=7, video_token_id=8)
    torch.testing.assert_close(out[[2, 3, 5, 6]], vis)
    assert out[[0, 1, 4, 7]].abs().sum() == 0
    with pytest.raises(ValueError, match="4 image/video placeholder tokens but 3"):
        merge_vision_embeddings(emb, ids, vis[:3], 7, 8)


def test_loader_roundtrip_and_errors(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"hidden_size": 32}}))
    write_random_vision_weights(tmp_path, seed=3)
    tower = load_vision_tower(tmp_path)
    from safetensors.torch import load_file, save_file

    raw = load_file(str(tmp_path / "vision.safetensors"))
    assert "multi_modal_projector.linear_1.weight" in raw
    assert "vision_tower.vision_model.encoder.layers.1.mlp.fc2.bias" in raw
    sd = tower.state_dict()
    torch.testing.assert_close(
        sd["vision_model.pre_layrnorm.weight"],
        raw["vision_tower.vision_model.pre_layrnorm.weight"].float(),
    )
    del raw["patch_merge_mlp.linear_2.bias"]
    save_file(raw, str(tmp_path / "vision.safetensors"))
    with pytest.raises(ValueError, match="vision weights missing"):
        load_vision_tower(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 32}))
    with pytest.raises(ValueError, match="no vision_config"):
        load_vision_tower(tmp_path)
