"""Issue 13, class 7: escape sequences from tool output, file names and model text never reach
the terminal raw. Attacks through the installed `m3agent` console script, as a subprocess:
a file whose first line writes the clipboard (OSC 52), retitles the window (OSC 2), clears the
screen (CSI 2J), an 8-bit CSI (C1 U+009B) and a bidi override; a file NAME holding ESC; a
model answer with the same. The control in each test: the raw bytes did reach the agent (the
session log holds them), so it is the output layer that stopped them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.agent.conversation import Conversation

from ..support.cli import scripted_run

HOSTILE = "\x1b]52;c;cHduZWQ=\x07\x1b]2;PWNED\x07\x1b[2J\x9b31m\u202etxt.exe"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")
EXE = Path(sys.executable).parent / "m3agent"
EVIL_NAME = "evil\x1b]2;NAME\x07.txt"


@pytest.fixture
def hostile_repo(make_repo) -> Path:
    return make_repo({"notes.txt": HOSTILE + "\nsecond line\n", EVIL_NAME: "x\n"})


def _run(cli, repo: Path, script: Path, fmt: str) -> subprocess.CompletedProcess:
    assert EXE.exists(), "the m3agent console script is not installed in this venv"
    return subprocess.run(
        [
            str(EXE),
            *scripted_run("look", script, repo, "--output-format", fmt, "--approval", "never"),
        ],
        env=cli.env(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def _script(cli, m3):
    return cli.script(
        m3.calls(m3.invoke("read_file", path="notes.txt"), m3.invoke("list_dir", path=".")),
        m3.answer("Done." + HOSTILE),
    )


def test_text_mode_shows_escapes_visibly(cli, hostile_repo, home, m3):
    r = _run(cli, hostile_repo, _script(cli, m3), "text")
    assert r.returncode == 0, r.stderr
    for raw in RAW:
        assert raw not in r.stdout and raw not in r.stderr, repr(raw)
    # Visible instead: the answer on stdout, the tool's first output line on stderr.
    assert r.stdout.startswith("Done.\\x1b]52;c;cHduZWQ=\\x07\\x1b]2;PWNED\\x07\\x1b[2J\\x9b31m")
    assert "\\u202etxt.exe" in r.stdout
    assert "\\x1b]52;c;" in r.stderr
    # Control: the agent itself got the raw bytes (the model must see the true output).
    sid = next(p.stem for p in (home / "sessions").glob("*.jsonl"))
    tool_out = [
        m.content for m in Conversation.load(home / "sessions", sid).messages if m.role == "tool"
    ]
    assert any(HOSTILE in t for t in tool_out)
    assert any(EVIL_NAME in t for t in tool_out)


@pytest.mark.parametrize("fmt", ["json", "stream-json"])
def test_json_keeps_escapes_escaped_and_exact(cli, hostile_repo, m3, fmt):
    r = _run(cli, hostile_repo, _script(cli, m3), fmt)
    assert r.returncode == 0, r.stderr
    for raw in RAW:
        assert raw not in r.stdout, repr(raw)
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert lines[-1]["answer"] == "Done." + HOSTILE  # escaped on the wire, exact once parsed
    if fmt == "stream-json":
        outputs = [e["output"] for e in lines if e["type"] == "tool_call_finished"]
        assert any(HOSTILE in o for o in outputs)
        assert any(EVIL_NAME in o for o in outputs)


def test_visible_and_dumps_units():
    from m3agent.app.safe_text import dumps, visible

    assert visible("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert visible("line\r\nnext\rover") == "line\nnext\\x0dover"
    assert visible("tab\tand\nnewline stay") == "tab\tand\nnewline stay"
    assert visible("\x9b\u202e\u2066\x7f\x00") == "\\x9b\\u202e\\u2066\\x7f\\x00"
    assert visible("plain ünïcode 日本") == "plain ünïcode 日本"
    text = dumps({"s": HOSTILE + "\u2028\x7f"})
    assert all(ord(c) >= 0x20 and not 0x7F <= ord(c) < 0xA0 for c in text)
    assert "\u202e" not in text and "\u2028" not in text
    assert json.loads(text) == {"s": HOSTILE + "\u2028\x7f"}


def test_context_listing_spells_out_a_hostile_file_name(hostile_repo, home, monkeypatch):
    """Issue 36, round 5: `m3agent context --files` printed the repository's file names raw
    (a name holding OSC 2 retitled the terminal). Control: the JSON form carries the same
    name, exactly, so the snapshot did list it."""
    from m3agent.app.cli import build_app
    from typer.testing import CliRunner

    monkeypatch.chdir(hostile_repo)
    r = CliRunner().invoke(build_app(), ["context", "--files"])
    assert r.exit_code == 0, r.output
    assert "evil\\x1b]2;NAME\\x07.txt" in r.output and not [c for c in RAW if c in r.output]
    r = CliRunner().invoke(build_app(), ["context", "--json"])
    assert EVIL_NAME in [f["path"] for f in json.loads(r.output)["files"]]


def test_cache_listing_spells_out_a_shared_folders_model_name(home):
    """Issue 36, round 5: the KV disk folder may be shared, and `m3agent cache` printed each
    model folder's model.json name raw. Control: `--json` carries it exactly."""
    from m3agent.app.cli import build_app
    from typer.testing import CliRunner

    folder = home / "kv-cache" / "0123456789abcdef0123"
    (folder / "pages" / "ab").mkdir(parents=True)
    (folder / "model.json").write_text(json.dumps({"name": HOSTILE}))
    (folder / "pages" / "ab" / "ab01.kvp").write_bytes(b"x" * 10)
    r = CliRunner().invoke(build_app(), ["cache"])
    assert r.exit_code == 0, r.output
    assert "\\x1b]2;PWNED\\x07" in r.output and not [c for c in RAW if c in r.output]
    r = CliRunner().invoke(build_app(), ["cache", "--json"])
    assert [m["name"] for m in json.loads(r.output)["models"]] == [HOSTILE]
