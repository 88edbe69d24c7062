"""Issue 22 item 7: /attach (and run --image) refuse an image for a text-only checkpoint at
once, in one line, instead of an HTTP 400 when the prompt is sent; a vision checkpoint (the
control) takes it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.app.tui.widgets.error_view import ErrorView
from pilot_steps import notice_after, ready, send
from png_bytes import PNG

pytestmark = pytest.mark.anyio
SIZE = (100, 30)


def _checkpoint(root: Path, vision: bool) -> Path:
    import numpy as np
    from safetensors.numpy import save_file

    d = root / ("vl" if vision else "text")
    d.mkdir()
    config = {"model_type": "minimax_m3_vl"}
    weights = {"model.embed_tokens.weight": np.zeros((2, 2), np.float32)}
    if vision:  # what the native engine looks for: vision_config and vision weights
        config["vision_config"] = {"hidden_size": 32}
        weights["vision_tower.patch_embed.weight"] = np.zeros((2, 2), np.float32)
    (d / "config.json").write_text(json.dumps(config))
    save_file(weights, str(d / "model.safetensors"))
    return d


def _app(harness, settings_model: Path):
    from dataclasses import replace

    from m3agent.app.settings import load_settings
    from m3agent.app.tui.app import create_app
    from m3agent.app.tui.launch import tui_config

    settings = load_settings().override(engine="native", model=str(settings_model))
    real = tui_config(settings, cwd=harness.repo, resume=None)
    # The scripted session of the harness; the config as launch builds it for that model.
    config = replace(harness.config(), media_refusal=real.media_refusal)
    return create_app(harness.session_factory(["</mm:think>ok"]), config)


@pytest.mark.parametrize("vision", [False, True])
async def test_attach_on_a_text_only_model_is_refused_at_once(harness, tmp_path, until, vision):
    (harness.repo / "shot.png").write_bytes(PNG)
    model = _checkpoint(tmp_path, vision)
    async with _app(harness, model).run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        if vision:
            notice = await notice_after(pilot, until, "/attach shot.png")
            assert "attached shot.png (image)" in notice
            assert len(main.controller.attachments) == 1
        else:
            await send(pilot, "/attach shot.png")
            await until(pilot, lambda: len(main.query(ErrorView)) > 0)
            text = str(main.query(ErrorView).last().render())
            assert "text is a text-only checkpoint (no vision tower)" in text
            assert main.controller.attachments == []
            # an @shot.png mention stays text: nothing is attached behind the user's back
            assert main.controller.make_turn("look at @shot.png").media == ()


def test_run_image_on_a_text_only_model_exits_2(tmp_path, home):
    (tmp_path / "shot.png").write_bytes(PNG)
    model = _checkpoint(tmp_path, vision=False)
    r = subprocess.run(
        [str(Path(sys.executable).with_name("m3agent")), "run", "look", "--engine", "native",
         "--model", str(model), "--image", str(tmp_path / "shot.png"), "-C", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "error: --image/--video: text is a text-only checkpoint (no vision tower): it cannot "
        "read images or videos"
    ]
