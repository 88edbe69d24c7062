"""Attacks first, on bad input that used to end the session: a 64 KB PNG whose zTXt or iCCP
chunk inflates to 64 MiB (built here), attached with `run --image` or returned by an MCP
server, and a prompt that is not UTF-8 (argument or stdin). Each gives one line and the
session goes on; the controls show the same input raising inside Pillow / the decoder."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from m3agent.app.settings import load_settings
from mcp_support import answer, calls, finished, invoke, write_server
from PIL import Image

M3AGENT = str(Path(sys.executable).parent / "m3agent")


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def bomb_png(where: str) -> bytes:
    """An 8x1 RGB PNG with a zTXt or iCCP chunk of 64 MiB of zeros, compressed to ~64 KB."""
    bomb = zlib.compress(b"\x00" * (64 << 20), 9)
    extra = (
        _chunk(b"iCCP", b"icc\x00\x00" + bomb)
        if where == "iccp"
        else _chunk(b"zTXt", b"Comment\x00\x00" + bomb)
    )
    ihdr = struct.pack(">IIBBBBB", 8, 1, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" + b"\xff\x00\x00" * 8)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", ihdr)
        + extra
        + _chunk(b"IDAT", idat)
        + _chunk(b"IEND", b"")
    )


def cli(home: Path, cwd: Path, tmp: Path, *args: str, stdin: bytes = b"", argv_bytes=None):
    script = tmp / "script.json"
    script.write_text(json.dumps(["</mm:think>ok"]))
    env = {**os.environ, "M3AGENT_HOME": str(home)}
    env.pop("M3AGENT_CONFIG", None)
    cmd = [M3AGENT, "run", "--engine", "scripted", "--script", str(script), *args]
    if argv_bytes is not None:
        cmd = [os.fsencode(c) for c in cmd] + [argv_bytes]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, input=stdin, timeout=120)


@pytest.mark.parametrize("where", ["ztxt", "iccp"])
def test_run_image_bomb_is_one_line_and_exit_2(home, repo, tmp_path, where):
    png = tmp_path / f"{where}.png"
    png.write_bytes(bomb_png(where))
    assert png.stat().st_size < 70_000
    r = cli(home, repo, tmp_path, "--image", str(png), "describe")
    err = r.stderr.decode()
    assert r.returncode == 2, err  # docs/cli.md: a bad attachment is a usage error
    assert err.count("\n") == 1 and err.startswith("error: ") and png.name in err
    assert "Traceback" not in err and "internal error" not in err


@pytest.mark.parametrize("where", ["ztxt", "iccp"])
def test_control_pillow_raises_on_the_bomb(tmp_path, where):
    with pytest.raises(ValueError, match="Decompressed"):
        Image.open(io.BytesIO(bomb_png(where)))


_BOMB_SERVER = """
import base64, sys
import mcp_types as t
from mcp.server import MCPServer

s = MCPServer("pics")
PAYLOAD = base64.b64encode(open(sys.argv[1], "rb").read()).decode()

@s.tool()
def chart() -> list:
    \"\"\"A chart (the PNG given on the command line).\"\"\"
    return [t.TextContent(type="text", text="the chart"),
            t.ImageContent(type="image", data=PAYLOAD, mime_type="image/png")]

if __name__ == "__main__":
    s.run()
"""


@pytest.mark.parametrize("good", [False, True], ids=["bomb", "control-good-png"])
def test_mcp_server_returning_the_bomb_is_a_tool_error_and_the_session_goes_on(
    home, repo, tmp_path, user_config, open_session, drive, good
):
    png = repo / ".servers" / "chart.png"
    script = write_server(repo / ".servers", _BOMB_SERVER, "pics.py")
    if good:
        Image.new("RGB", (32, 32), (1, 2, 3)).save(png)
    else:
        png.write_bytes(bomb_png("ztxt"))
    user_config(
        "[mcp_servers.pics]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f"args = [{json.dumps(str(script))}, {json.dumps(str(png))}]\n"
    )
    turns = [calls(invoke("mcp__pics__chart")), answer("seen"), answer("still here")]
    session = open_session(load_settings(), repo, turns)
    events, last = drive(session, "show the chart", "and then?")
    (result,) = finished(events)
    if good:
        assert not result.is_error and "image not shown" not in result.output
    else:
        assert result.is_error and "image not shown" in result.output
        assert "Decompressed" in result.output and result.output.count("\n") <= 2
    assert last is not None  # the second prompt ran: the session went on
    tool_msgs = [m for m in session.conversation.messages if m.role == "tool"]
    assert bool(tool_msgs[0].media) is good


# ---- a prompt that is not UTF-8 ---------------------------------------------------------------

NOT_UTF8 = b"fix \xff\xfe the caf\xe9 bug"


def test_non_utf8_prompt_argument_is_decoded_with_replacement(home, repo, tmp_path):
    r = cli(home, repo, tmp_path, argv_bytes=NOT_UTF8)
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "not valid UTF-8" in err and "internal error" not in err
    assert "ok" in r.stdout.decode()
    log = max((home / "sessions").rglob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    assert "fix \ufffd\ufffd the caf\ufffd bug" in log.read_text(encoding="utf-8")


def test_non_utf8_prompt_on_stdin_is_decoded_with_replacement(home, repo, tmp_path):
    r = cli(home, repo, tmp_path, "-", stdin=NOT_UTF8)
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert "not valid UTF-8" in err and "internal error" not in err


def test_control_strict_decoding_of_those_bytes_fails():
    with pytest.raises(UnicodeDecodeError):
        NOT_UTF8.decode("utf-8")
    assert os.fsdecode(NOT_UTF8).encode("utf-8", "surrogateescape") == NOT_UTF8
    with pytest.raises(UnicodeEncodeError):  # what the log write used to hit
        os.fsdecode(NOT_UTF8).encode("utf-8")


def test_a_valid_utf8_prompt_gets_no_note(home, repo, tmp_path):
    r = cli(home, repo, tmp_path, "-", stdin="réparer \ufffd".encode())
    assert r.returncode == 0 and "not valid UTF-8" not in r.stderr.decode()
