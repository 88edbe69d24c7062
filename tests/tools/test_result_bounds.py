"""Every tool result is bounded and says what it cut (issue 13, class 9).

Each test makes a real input whose unbounded result is large (the control computes that size,
e.g. difflib's whole diff) and asserts the tool's result stays within its bound, names the
cut, and that the change itself (the file on disk) is complete."""

from __future__ import annotations

import asyncio
import difflib
import os
import shutil
import threading

import pytest
from m3agent.tools import bounds
from m3agent.tools.base import Tool, ToolContext, ToolResult
from m3agent.tools.grep import Grep
from m3agent.tools.toolset import Toolset, default_toolset
from pydantic import BaseModel

BIG = "".join(f"line {i} value = {i * 7}\n" for i in range(60_000))  # 1.5 MB


@pytest.fixture
def ws(tmp_path):
    d = tmp_path / "ws"
    d.mkdir()
    return d


def run(ws, name, **args):
    return default_toolset().dispatch(name, args, ToolContext(cwd=ws))


def test_edit_file_diff_of_a_large_file_is_cut(ws):
    (ws / "big.py").write_text(BIG)
    new = BIG.replace("value", "VALUE")
    whole = "".join(difflib.unified_diff(BIG.splitlines(True), new.splitlines(True)))
    assert len(whole) > 3_000_000  # control: the diff edit_file used to return
    r = run(
        ws, "edit_file", path="big.py", old_string="value", new_string="VALUE", replace_all=True
    )
    assert not r.is_error
    assert (ws / "big.py").read_text() == new  # the change itself is whole
    assert len(r.output.encode()) < bounds.DIFF_BYTES + 1000
    assert "[diff cut: showing" in r.output and "of 120003 lines" in r.output
    assert r.metadata["truncated"] is True
    assert len(r.metadata["diff"].encode()) < bounds.META_DIFF_BYTES + 1000


def test_edit_file_small_diff_is_whole(ws):
    (ws / "a.py").write_text("x = 1\ny = 2\n")
    r = run(ws, "edit_file", path="a.py", old_string="x = 1", new_string="x = 3")
    assert "-x = 1\n+x = 3" in r.output and "cut" not in r.output
    assert r.metadata["truncated"] is False


def test_a_huge_single_line_diff_is_cut_inside_the_line(ws):
    (ws / "min.js").write_text("var a=" + "1," * 400_000 + "0;\n")
    r = run(ws, "edit_file", path="min.js", old_string="var a=", new_string="var b=")
    assert len(r.output.encode()) < bounds.DIFF_BYTES + 1000
    assert "[line cut]" in r.output and "[diff cut" in r.output


def test_apply_patch_of_a_large_file_is_cut(ws):
    lines = [f"row {i}" for i in range(30_000)]
    patch = (
        "*** Begin Patch\n*** Add File: gen.txt\n"
        + "".join(f"+{x}\n" for x in lines)
        + "*** End Patch\n"
    )
    r = run(ws, "apply_patch", patch=patch)
    assert not r.is_error, r.output
    assert (ws / "gen.txt").read_text() == "\n".join(lines) + "\n"
    assert len(r.output.encode()) < bounds.DIFF_BYTES + 1000
    assert r.output.startswith("added gen.txt") and "[diff cut: showing" in r.output


def test_write_file_metadata_diff_is_bounded(ws):
    (ws / "big.py").write_text(BIG)
    r = run(ws, "write_file", path="big.py", content=BIG.upper())
    assert r.output.startswith("updated big.py")
    assert len(r.metadata["diff"].encode()) < bounds.META_DIFF_BYTES + 1000
    assert "[diff cut" in r.metadata["diff"]


@pytest.mark.parametrize("engine", ["python", "rg"])
def test_grep_output_is_bounded_in_characters(ws, engine):
    if engine == "rg" and not shutil.which("rg"):
        pytest.skip("ripgrep is not installed")
    (ws / "m.txt").write_text("".join(f"needle {i} " + "x" * 380 + "\n" for i in range(2000)))
    tool = Grep(use_ripgrep=engine == "rg")
    r = Toolset([tool]).dispatch(
        "grep", {"pattern": "needle", "max_matches": 2000}, ToolContext(cwd=ws)
    )
    assert 2000 * 390 > 700_000  # control: the rows it would return uncut
    assert len(r.output) < bounds.LISTING_CHARS + 500
    assert "more matching rows left out" in r.output and r.metadata["truncated"]


# tool: (its arguments, the folder, n files named NNNN + name, ~characters a row, the words
# that say rows were left out)
LISTINGS = {
    "glob": (
        {"pattern": "**/*.py"},
        "d" * 100 + "/" + "e" * 100,
        400,
        "f" * 200 + ".py",
        410,
        "more paths left out",
    ),
    "list_dir": ({"path": "."}, ".", 800, "n" * 240, 245, "more entries]"),
}


@pytest.mark.parametrize("tool", LISTINGS)
def test_listing_output_is_bounded_in_characters(ws, tool):
    args, folder, n, name, row_chars, left_out = LISTINGS[tool]
    d = ws / folder
    d.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        (d / f"{i:04d}{name}").write_text("")
    r = run(ws, tool, **args)
    assert n * row_chars > bounds.LISTING_CHARS  # control
    assert len(r.output) < bounds.LISTING_CHARS + 500
    assert left_out in r.output


def test_read_file_cuts_an_enormous_line(ws):
    (ws / "one.txt").write_text("start " + "z" * 1_900_000 + "\nsecond line\n")
    r = run(ws, "read_file", path="one.txt")
    assert not r.is_error
    assert len(r.output) < 20_000
    assert "[line cut: " in r.output and "second line" in r.output


def test_read_file_does_not_block_on_a_fifo(ws):
    os.mkfifo(ws / "pipe")
    result: list[ToolResult] = []
    t = threading.Thread(
        target=lambda: result.append(run(ws, "read_file", path="pipe")), daemon=True
    )
    t.start()
    t.join(10)
    assert result, "read_file hung on a FIFO"
    assert result[0].is_error and "not a regular file" in result[0].output


class _Fixed(Tool):
    """A tool that returns the one result it was made with, whatever its arguments."""

    description = "returns a fixed result"

    class Args(BaseModel):
        pass

    def __init__(self, name: str, result: ToolResult) -> None:
        self.name, self._result = name, result

    def run(self, args, ctx):
        return self._result


def _dispatched(ws, result: ToolResult) -> ToolResult:
    """`result` as Toolset.dispatch hands it on (the last net applied)."""
    return Toolset([_Fixed("fixed", result)]).dispatch("fixed", {}, ToolContext(cwd=ws))


def test_the_toolset_bounds_any_tool(ws):
    r = _dispatched(ws, ToolResult("a" * 3_000_000 + "END"))
    assert len(r.output) < bounds.RESULT_CHARS + 200
    assert "[result cut: " in r.output and r.output.endswith("END")
    assert r.metadata["truncated"]


def test_a_cut_result_keeps_the_images_whose_text_it_keeps(ws):
    """The last net cuts the middle of a long result: an image whose caption stays in the head
    or the tail stays, just after its caption (offsets past the cut move with the text); the
    one in the part cut out goes with it. (It used to drop every image of a cut result.)"""
    filler = "x" * bounds.RESULT_CHARS
    text, media = "", []
    for caption, before in (("[head]", "intro "), ("[middle]", filler), ("[tail]", filler)):
        text += before + caption
        media.append(("image", f"/m/{caption[1:-1]}.png", len(text)))
    assert len(text) > bounds.RESULT_CHARS  # control: a result the net must cut
    r = _dispatched(ws, ToolResult(text + " end", media=tuple(media)))
    assert r.metadata["truncated"] and "[result cut: " in r.output
    assert "[middle]" not in r.output
    assert [path for _, path, _ in r.media] == ["/m/head.png", "/m/tail.png"]
    for (_, path, off), caption in zip(r.media, ("[head]", "[tail]"), strict=True):
        assert r.output[off - len(caption) : off] == caption, path


def test_escaped_bytes_move_the_images_after_them(ws):
    """A non-UTF-8 byte (a lone surrogate) is written as four characters (\\xNN): an image
    after it moves with its caption."""
    text = "file b\udcffad.png [pic]"
    r = _dispatched(ws, ToolResult(text, media=(("image", "/m/pic.png", len(text)),)))
    assert "\\xff" in r.output
    ((_, _, off),) = r.media
    assert r.output[:off].endswith("[pic]")


def test_the_model_is_not_resent_a_whole_diff(ws, tmp_path):
    """A session edits a 1.5 MB file: the next request grows by the bounded result only."""
    from m3agent.agent.config import AgentConfig
    from m3agent.agent.session import Session
    from m3agent.engine.backends.scripted import ScriptedEngine

    (ws / "big.py").write_text(BIG)
    ns = "]<]minimax[>["
    call = (
        f'</mm:think>{ns}<tool_call>\n{ns}<invoke name="edit_file">{ns}<path>big.py'
        f"{ns}</path>{ns}<old_string>value{ns}</old_string>{ns}<new_string>VALUE"
        f"{ns}</new_string>{ns}<replace_all>true{ns}</replace_all>{ns}</invoke>\n"
        f"{ns}</tool_call>"
    )
    engine = ScriptedEngine([call, "</mm:think>done"])
    session = Session.create(
        engine,
        default_toolset(),
        AgentConfig(approval_policy="never", thinking_default="enabled"),
        sessions_dir=tmp_path / "sessions",
        cwd=ws,
    )

    async def go():
        done = await session.run_prompt("rename")
        await session.close()
        return done

    assert asyncio.run(go()).reason == "done"
    assert (ws / "big.py").read_text() == BIG.replace("value", "VALUE")
    first, second = engine.prompts
    assert len(second) - len(first) < bounds.DIFF_BYTES + 2000
    assert "[diff cut: showing" in second
    log = (tmp_path / "sessions" / f"{session.id}.jsonl").stat().st_size
    assert log < 2 * bounds.META_DIFF_BYTES  # the log keeps the bounded diff, not 3.2 MB
