"""A real stdio MCP server (the SDK's own server, in a subprocess under the sandbox) whose
tools a scripted M3 model calls through the whole agent loop."""

from __future__ import annotations

import json
import time
from pathlib import Path

from m3agent.agent import events as ev
from m3agent.app.settings import load_settings
from m3agent.tools.mcp import mcp_hub
from mcp_support import answer, calls, finished, invoke, of_type

from ...support.cli import scripted_run


def test_tools_are_listed_called_and_answered(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    user_config(stdio_config("demo", server))
    script = [calls(invoke("mcp__demo__add", a=2, b=40)), answer("2 + 40 = 42")]
    session = open_session(load_settings(), repo, script)
    names = session.toolset.names()
    assert [n for n in names if n.startswith("mcp")] == [
        "mcp__demo__add",
        "mcp__demo__pic",
        "mcp__demo__photo",
        "mcp__demo__big_photo",
        "mcp__demo__grow",
        "mcp__demo__crash",
        "mcp__demo__die_soon",
        "mcp__demo__hang",
        "mcp__demo__slow",
        "mcp__demo__env",
        "mcp__demo__write",
        "mcp__demo__connect",
        "mcp__demo__big",
        "mcp__demo__whoami",
        "mcp_read_resource",
    ]
    schema = session.toolset.get("mcp__demo__add").schema()
    assert schema["function"]["description"] == "Add two integers."
    assert schema["function"]["parameters"]["required"] == ["a", "b"]
    asked = []
    events, done = drive(session, "add them", decide=lambda r: asked.append(r.name) or "approve")
    assert done.reason == "done" and done.answer == "2 + 40 = 42"
    (result,) = finished(events)
    assert result.name == "mcp__demo__add" and not result.is_error
    assert result.output.startswith("42")
    assert result.metadata["structured_content"] == {"result": 42}
    assert asked == ["mcp__demo__add"]  # an MCP tool asks first under on-request
    # The tools sit in the prompt: the second request extends the first, token for token.
    engine = session.engine
    assert '"mcp__demo__add"' in engine.prompts[0] or "mcp__demo__add" in engine.prompts[0]
    first, second = engine.prompt_token_ids
    assert second[: len(first)] == first
    # The tool message in the log is the model-facing text.
    tool_msgs = [m for m in session.messages if m.role == "tool"]
    assert tool_msgs[0].name == "mcp__demo__add" and tool_msgs[0].content.startswith("42")


def test_a_broken_image_stays_a_note_and_the_linked_resource_is_readable(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    user_config(stdio_config("demo", server))
    script = [
        calls(invoke("mcp__demo__pic")),
        calls(invoke("mcp_read_resource", server="demo", uri="mem://report")),
        answer("read it"),
    ]
    session = open_session(load_settings(), repo, script)
    events, done = drive(session, "show the chart")
    pic, res = finished(events)
    assert "here is the chart" in pic.output
    assert "[image/png image, 8 bytes, saved to " in pic.output
    saved = Path(pic.metadata["images"][0])
    assert saved.read_bytes().startswith(b"\x89PNG") and saved.is_relative_to(home)
    assert 'mcp_read_resource(server="demo", uri="mem://report")' in pic.output
    assert pic.metadata["resource_links"] == ["mem://report"]
    assert not res.is_error and res.output == "the full report text"
    # 8 bytes are no image: the note stays text and no placeholder reaches the prompt.
    tool = [m for m in session.messages if m.role == "tool"][0]
    assert tool.media == ()


def test_an_image_result_reaches_the_model_inside_the_tool_response(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    user_config(stdio_config("demo", server))
    session = open_session(
        load_settings(), repo, [calls(invoke("mcp__demo__photo")), answer("a red square")]
    )
    events, done = drive(session, "look at the photo")
    assert done.reason == "done"
    tool = [m for m in session.messages if m.role == "tool"][0]
    assert [p.kind for p in tool.media] == ["image"]
    assert Path(tool.media[0].path).read_bytes().startswith(b"\x89PNG")
    assert tool.content[: tool.media[0].offset].endswith("]")  # right after its own note
    # The real template's layout: the placeholder inside the tool's <response>.
    prompt = session.engine.prompts[-1]
    response = prompt[prompt.rindex("<response>") :].split("</response>")[0]
    assert "the photo" in response and "]<]image[>[" in response


def test_list_changed_is_noted_but_the_session_tool_set_stays(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    user_config(stdio_config("demo", server))
    script = [
        calls(invoke("mcp__demo__grow")),
        answer("grew"),
        calls(invoke("mcp__demo__add", a=1, b=1)),
        answer("2"),
    ]
    session = open_session(load_settings(), repo, script)
    before = session.toolset.schemas()
    events, done = drive(session, "grow", "add")
    assert done.reason == "done"
    (status,) = mcp_hub(session.toolset).statuses()
    assert status.tools_changed  # notifications/tools/list_changed reached us
    assert "mcp__demo__late_tool" not in session.toolset.names()
    assert session.toolset.schemas() == before
    first, *rest = session.engine.prompt_token_ids
    for ids in rest:  # no request rewrote the prompt's first block
        assert ids[: len(first)] == first
    from m3agent.app.mcp.check import session_report

    report = session_report(session.toolset)
    assert "  demo  " in report and "tool list changed" in report


def test_list_changed_from_a_pre_2026_server(
    home, repo, user_config, stdio_config, open_session, drive
):
    from mcp_support import LEGACY, write_server

    script_path = write_server(repo / ".servers", LEGACY, "legacy.py")
    user_config(stdio_config("old", script_path))
    script = [calls(invoke("mcp__old__change")), answer("changed")]
    session = open_session(load_settings(), repo, script)
    (status,) = mcp_hub(session.toolset).statuses()
    assert "protocol 2025-06-18" in status.detail  # the initialize handshake
    events, _ = drive(session, "change")
    assert finished(events)[0].output == "changed"
    assert mcp_hub(session.toolset).statuses()[0].tools_changed


def test_output_is_bounded(home, repo, server, user_config, stdio_config, open_session, drive):
    user_config(stdio_config("demo", server))
    script = [calls(invoke("mcp__demo__big", n=300_000)), answer("big")]
    session = open_session(load_settings(), repo, script)
    events, _ = drive(session, "big")
    (big,) = finished(events)
    assert big.metadata["truncated"] is True
    assert len(big.output) < 101_000 and "[result cut: " in big.output


def test_a_cut_result_keeps_its_image_at_its_note(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    """A long text block, then an image: the middle of the text is cut, and the image (in the
    kept tail) still reaches the model right after its own note. It used to be dropped."""
    user_config(stdio_config("demo", server))
    script = [calls(invoke("mcp__demo__big_photo", n=300_000)), answer("red")]
    session = open_session(load_settings(), repo, script)
    events, done = drive(session, "look")
    assert done.reason == "done"
    tool = [m for m in session.messages if m.role == "tool"][0]
    assert len(tool.content) < 101_000 and "[result cut: " in tool.content
    assert [p.kind for p in tool.media] == ["image"]
    assert tool.content[: tool.media[0].offset].endswith("]")


def test_interrupt_cancels_the_call_on_the_server(
    home, repo, server, user_config, stdio_config, open_session, drive
):
    user_config(stdio_config("demo", server))
    marker = repo / "cancelled.txt"
    script = [calls(invoke("mcp__demo__slow", marker=str(marker)))]
    session = open_session(load_settings(), repo, script)
    started = time.monotonic()
    events, done = drive(session, "wait", interrupt_after=0.5)
    assert done.reason == "interrupted" and time.monotonic() - started < 15
    (res,) = finished(events)
    assert res.is_error and res.metadata.get("interrupted")
    deadline = time.monotonic() + 5  # the SDK sent notifications/cancelled; the handler saw it
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.read_text() == "cancelled"


def test_stream_json_carries_mcp_calls_like_any_tool(home, repo, server, tmp_path):
    import subprocess
    import sys

    cfg = tmp_path / "servers.json"
    cfg.write_text(
        json.dumps({"mcpServers": {"demo": {"command": sys.executable, "args": [str(server)]}}})
    )
    script = tmp_path / "script.json"
    script.write_text(json.dumps([calls(invoke("mcp__demo__add", a=1, b=2)), answer("3")]))
    exe = Path(sys.executable).parent / "m3agent"
    proc = subprocess.run(
        [
            str(exe),
            *scripted_run("add", script, repo),
            "--mcp-config",
            str(cfg),
            "--approval",
            "never",
            "--output-format",
            "stream-json",
            "--no-context",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(x) for x in proc.stdout.splitlines()]
    started = [x for x in lines if x["type"] == "tool_call_started"]
    ended = [x for x in lines if x["type"] == "tool_call_finished"]
    assert started[0]["name"] == "mcp__demo__add" and started[0]["arguments"] == {"a": 1, "b": 2}
    assert ended[0]["output"].startswith("3") and ended[0]["is_error"] is False
    assert ended[0]["metadata"]["mcp_server"] == "demo"
    assert of_type([], ev.Error) == []
