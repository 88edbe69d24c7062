"""ctrl+v with an image on the clipboard attaches it (through `wl-paste` here: a stand-in
program on PATH that answers as wl-paste does); with text only, the prompt's own paste."""

from __future__ import annotations

import os
import stat

import pytest
from m3agent.app.tui.widgets.notice_view import NoticeView
from pilot_steps import ready
from png_bytes import PNG

pytestmark = pytest.mark.anyio
SIZE = (100, 30)


def _wl_paste(bin_dir, png_file, types: str) -> None:
    tool = bin_dir / "wl-paste"
    tool.write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = "--list-types" ]; then printf "{types}\\n"; exit 0; fi\n'
        f'for a in "$@"; do [ "$a" = image/png ] && exec cat {png_file}; done\n'
        "exit 1\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("has_image", [True, False])
async def test_ctrl_v_attaches_a_clipboard_image(harness, until, tmp_path, monkeypatch, has_image):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    png = tmp_path / "shot.png"
    png.write_bytes(PNG)
    _wl_paste(bin_dir, png, "image/png\\ntext/plain" if has_image else "text/plain")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    app = harness.app(["</mm:think>ok"])
    async with app.run_test(size=SIZE) as pilot:
        main = await ready(pilot, until)
        app.copy_to_clipboard("some text")
        main.query_one("PromptInput").focus()
        await pilot.press("ctrl+v")
        await pilot.pause(0.3)
        if has_image:
            await until(pilot, lambda: len(main.controller.attachments) == 1)
            saved = main.controller.attachments[0].path
            assert open(saved, "rb").read() == PNG and "/pasted/" in saved
            notices = [str(n.render()) for n in main.query(NoticeView)]
            assert any("(image) to the next prompt" in n for n in notices), notices
        else:
            assert main.controller.attachments == []
            assert main.query_one("PromptInput").text == "some text"
