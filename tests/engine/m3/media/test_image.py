"""Images: token counts by the SPEC's worked values, modes, orientation, patch order, errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
from m3agent.engine.m3.media import MediaConfig, MediaError, MediaLimits, load_image
from m3agent.engine.m3.media.patches import frames_to_patches, patches_to_frames
from m3agent.engine.m3.media.resize import smart_resize
from PIL import Image


@pytest.mark.parametrize(
    ("w", "h", "rw", "rh", "tokens"),
    [
        (224, 224, 224, 224, 64),
        (672, 672, 672, 672, 576),
        (1024, 768, 756, 560, 540),
        (1920, 1080, 896, 504, 576),
        (100, 100, 112, 112, 16),
    ],
)
def test_spec_worked_values(tmp_path, w, h, rw, rh, tokens):
    p = tmp_path / "img.png"
    Image.new("RGB", (w, h), (10, 20, 30)).save(p)
    item = load_image(p)
    assert item.resized_hw == (rh, rw)
    assert item.num_tokens == tokens == rh * rw // 784
    assert item.grid_thw == (1, rh // 14, rw // 14)
    assert item.pixel_values.shape == (tokens * 4, 1176)
    assert item.pixel_values.dtype == np.float32


def test_smart_resize_formula_properties():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        h, w = (int(x) for x in rng.integers(8, 5000, size=2))
        if max(h, w) / min(h, w) > 200:
            with pytest.raises(ValueError):
                smart_resize(h, w)
            continue
        rh, rw = smart_resize(h, w)
        assert rh % 28 == 0 and rw % 28 == 0
        assert rh * rw <= 451584
        # The ceil path only grows; the floor path only drops below the minimum for
        # extreme aspect ratios.
        assert rh * rw >= 3136 or max(h, w) / min(h, w) > 50
        if max(28, round(h / 28) * 28) * max(28, round(w / 28) * 28) <= 451584 and h * w >= 3136:
            assert (rh, rw) == (max(28, round(h / 28) * 28), max(28, round(w / 28) * 28))


def test_long_side_mode():
    assert smart_resize(1080, 1920, max_long_side=1024) == (588, 1036)
    assert smart_resize(50, 80, max_long_side=1024) == (112, 168)  # short side -> 112
    with pytest.raises(ValueError, match="cap"):
        smart_resize(4000, 4000, max_long_side=5000)


@pytest.mark.parametrize(
    ("fmt", "mode"),
    [
        ("PNG", "RGBA"),
        ("PNG", "LA"),
        ("PNG", "P"),
        ("PNG", "I;16"),
        ("PNG", "1"),
        ("JPEG", "L"),
        ("JPEG", "CMYK"),
        ("WEBP", "RGBA"),
        ("BMP", "RGB"),
        ("GIF", "P"),
    ],
)
def test_modes_and_formats_odd_sizes(tmp_path, fmt, mode):
    p = tmp_path / f"x.{fmt.lower()}"
    img = Image.new(mode, (333, 97))
    img.save(p, format=fmt)
    item = load_image(p)
    h, w = smart_resize(97, 333)
    assert item.resized_hw == (h, w)
    assert item.num_tokens == h * w // 784


def test_alpha_flattened_on_white(tmp_path):
    p = tmp_path / "t.png"
    Image.new("RGBA", (56, 56), (0, 0, 0, 0)).save(p)
    frames = patches_to_frames(load_image(p).pixel_values, (1, 4, 4), MediaConfig())
    assert (frames == 255).all()


def test_gif_first_frame(tmp_path):
    p = tmp_path / "a.gif"
    red = Image.new("RGB", (56, 56), (255, 0, 0))
    blue = Image.new("RGB", (56, 56), (0, 0, 255))
    red.save(p, save_all=True, append_images=[blue], duration=100)
    frame = patches_to_frames(load_image(p).pixel_values, (1, 4, 4), MediaConfig())[0]
    assert frame[..., 0].mean() > 200 and frame[..., 2].mean() < 50


def test_exif_orientation_applied(tmp_path):
    p = tmp_path / "rot.jpg"
    img = Image.new("RGB", (280, 56), (200, 10, 10))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    img.save(p, exif=exif)
    item = load_image(p)
    assert item.source_hw == (280, 56)  # portrait after orientation
    assert item.resized_hw == (280, 56)


def test_patch_order_is_merge_window_order():
    cfg = MediaConfig()
    frame = np.arange(56 * 84 * 3, dtype=np.int64).reshape(56, 84, 3) % 251
    frame = frame.astype(np.uint8)
    pv = frames_to_patches([frame], cfg)
    assert pv.shape == (4 * 6, 1176)
    std, mean = np.array(cfg.std), np.array(cfg.mean)
    # row r: window (bh, bw) then (mh, mw) inside it; columns: C, T, 14, 14
    for r in range(pv.shape[0]):
        win, inner = divmod(r, 4)
        bh, bw = divmod(win, 3)
        mh, mw = divmod(inner, 2)
        y, x = (2 * bh + mh) * 14, (2 * bw + mw) * 14
        expect = frame[y : y + 14, x : x + 14].transpose(2, 0, 1)  # C,14,14
        got = pv[r].reshape(3, 2, 14, 14)
        for c in range(3):
            pix = (got[c] * std[c] + mean[c]) * 255
            np.testing.assert_allclose(pix[0], expect[c], atol=1e-3)
            np.testing.assert_allclose(pix[1], expect[c], atol=1e-3)  # image padded to 2 frames
    assert (patches_to_frames(pv, (1, 4, 6), cfg)[0] == frame).all()


def test_normalisation_values(tmp_path):
    p = tmp_path / "c.png"
    Image.new("RGB", (28, 28), (255, 0, 128)).save(p)
    pv = load_image(p).pixel_values
    cfg = MediaConfig()
    expect = [(v / 255 - m) / s for v, m, s in zip((255, 0, 128), cfg.mean, cfg.std, strict=True)]
    got = pv.reshape(-1, 3, 2, 14, 14)
    for c in range(3):
        np.testing.assert_allclose(got[:, c], expect[c], rtol=1e-5)


def test_decompression_bomb_refused_before_decoding(tmp_path):
    p = tmp_path / "bomb.png"
    # 10000 x 10000 = 100 MP of one colour: a small file that would decode to 300 MB.
    Image.new("1", (10000, 10000)).save(p, optimize=True)
    assert p.stat().st_size < 2_000_000
    with pytest.raises(MediaError, match=r"100\.0 MP.*not decoded"):
        load_image(p)


def test_bad_inputs_give_one_line_errors(tmp_path):
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"definitely not an image" * 10)
    buf = io.BytesIO()
    Image.effect_noise((300, 300), 50).convert("RGB").save(buf, format="JPEG")
    trunc = tmp_path / "trunc.jpg"
    trunc.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 3])
    tiff = tmp_path / "x.tiff"
    Image.new("RGB", (30, 30)).save(tiff)
    thin = tmp_path / "thin.png"
    Image.new("RGB", (2010, 10)).save(thin)
    cases = {
        tmp_path / "missing.png": "file not found",
        empty: "file is empty",
        junk: "not a recognised image",
        trunc: "corrupt or truncated image",
        tiff: "format TIFF is not supported",
        thin: "aspect ratio",
    }
    for path, needle in cases.items():
        with pytest.raises(MediaError) as e:
            load_image(path)
        msg = str(e.value)
        assert needle in msg and "\n" not in msg and msg.startswith(path.name)


def test_file_size_limit(tmp_path):
    p = tmp_path / "big.png"
    Image.new("RGB", (64, 64)).save(p)
    with pytest.raises(MediaError, match="above the limit"):
        load_image(p, limits=MediaLimits(max_file_bytes=10))
