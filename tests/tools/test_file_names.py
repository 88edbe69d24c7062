"""Issue 21 item 8, the file-tool part: a repository file name with non-UTF-8 bytes.

Python hands such a name over with lone surrogates (surrogateescape); written into a tool
result it cannot be encoded into the session log and used to end the session at the first
`list_dir` ("internal error: UnicodeEncodeError"). The tools show each undecodable byte as
`\\xNN` and accept the escaped name back, so the model can read and edit the file. Driven
through the installed `m3agent run` with the scripted engine (real parsers, real tools).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.grep import Grep

from ..support.markup import calls, invoke


def _call(name: str, **args: str) -> str:
    return calls(invoke(name, **args))


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    os.mkdir(os.fsencode(root) + b"/d\xff")
    with open(os.fsencode(root) + b"/caf\xe9.txt", "wb") as f:
        f.write(b"needle one\n")
    with open(os.fsencode(root) + b"/d\xff/x.txt", "wb") as f:
        f.write(b"needle two\n")
    return root


def _run(tmp_path: Path, ws: Path, calls: list[str]) -> list[dict]:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([*calls, "</mm:think>done"]))
    env = dict(os.environ, M3AGENT_HOME=str(tmp_path / "home"))
    env.pop("M3AGENT_CONFIG", None)
    exe = Path(sys.executable).with_name("m3agent")
    r = subprocess.run(
        [str(exe), "run", "go", "--engine", "scripted", "--script", str(script), "--cwd",
         str(ws), "--output-format", "stream-json"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    events = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert r.returncode == 0, (r.stderr, events[-3:])
    assert not [e for e in events if e["type"] == "error"], events
    return [e for e in events if e["type"] == "tool_call_finished"]


def test_non_utf8_names_listed_escaped_and_addressable(tmp_path, ws):
    done = _run(
        tmp_path,
        ws,
        [
            _call("list_dir", path="."),
            _call("glob", pattern="**/*.txt"),
            _call("grep", pattern="needle"),
            _call("read_file", path="caf\\xe9.txt"),
            _call("edit_file", path="caf\\xe9.txt", old_string="one", new_string="uno"),
            _call("write_file", path="d\\xff/new.txt", content="fresh\n"),
        ],
    )
    out = {e["name"]: e for e in done}
    assert out["list_dir"]["output"].split("\n") == ["caf\\xe9.txt", "d\\xff/"]
    assert out["glob"]["output"].split("\n") == ["caf\\xe9.txt", "d\\xff/x.txt"]
    assert "caf\\xe9.txt:1:needle one" in out["grep"]["output"]
    assert "d\\xff/x.txt:1:needle two" in out["grep"]["output"]
    assert "needle one" in out["read_file"]["output"]
    assert not out["edit_file"]["is_error"] and not out["write_file"]["is_error"]
    base = os.fsencode(ws)
    assert open(base + b"/caf\xe9.txt", "rb").read() == b"needle uno\n"  # the real file
    assert open(base + b"/d\xff/new.txt", "rb").read() == b"fresh\n"


def test_python_grep_fallback_escapes_names(ws):
    r = Grep(use_ripgrep=False).run(Grep.Args(pattern="needle"), ToolContext(cwd=ws))
    assert r.output.split("\n") == ["caf\\xe9.txt:1:needle one", "d\\xff/x.txt:1:needle two"]
    r.output.encode("utf-8")


def test_control_raw_name_cannot_be_logged(ws):
    """Without the escaping: the name as os.listdir gives it is what the log failed on."""
    raw = sorted(os.listdir(ws))
    with pytest.raises(UnicodeEncodeError):
        json.dumps({"output": "\n".join(raw)}, ensure_ascii=False).encode("utf-8")
