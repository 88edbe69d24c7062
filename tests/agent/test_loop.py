"""The turn loop with the real ScriptedEngine (real renderer, tokenizer, parsers) and real tools."""

from __future__ import annotations

import json

from m3agent.agent import events as ev
from m3agent.agent.conversation import Conversation


def test_edit_then_answer(home, repo, m3):
    script = [
        m3.calls(
            m3.invoke("edit_file", path="calc.py", old_string="a - b", new_string="a + b"),
            reasoning="The bug is the minus sign.",
            before="Fixing it.",
        ),
        m3.answer("Fixed: add now adds.", reasoning="Done."),
    ]

    s, seen, done = m3.one_turn(home, repo, script, "fix add")
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert done.reason == "done" and done.answer == "Fixed: add now adds."
    types = [e.type for e in seen]
    assert types[0] == "session_started" and "turn_started" in types
    assert "".join(e.text for e in seen if isinstance(e, ev.ReasoningDelta)) == (
        "The bug is the minus sign.Done."
    )
    finished = [e for e in seen if isinstance(e, ev.ToolCallFinished)]
    assert len(finished) == 1 and not finished[0].is_error
    assert len([e for e in seen if isinstance(e, ev.ModelRequestFinished)]) == 2
    roles = [m.role for m in s.messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    first = s.messages[2]
    assert first.reasoning == "The bug is the minus sign." and first.content == "Fixing it."
    assert first.raw_text == script[0] and first.thinking_mode == "enabled"
    assert s.messages[3].tool_call_id == first.tool_calls[0].id
    # The usage is summed over both engine calls; the second call reused cached pages.
    assert done.usage.prompt_tokens > 0 and done.last_usage.cached_prompt_tokens > 0


def test_bad_tool_calls_become_error_results_the_model_sees(home, repo, m3):
    script = [
        m3.calls(
            m3.invoke("no_such_tool", x="1"),
            m3.invoke("read_file"),  # missing its required path
            m3.invoke("edit_file", path="calc.py", old_string="not there", new_string="y"),
        ),
        m3.answer("I could not do it."),
    ]

    s, seen, done = m3.one_turn(home, repo, script, "try things")
    assert done.reason == "done"
    results = [e for e in seen if isinstance(e, ev.ToolCallFinished)]
    assert [r.is_error for r in results] == [True, True, True]
    assert "unknown tool 'no_such_tool'" in results[0].output
    assert "path" in results[1].output
    # The model saw the errors: they are in the prompt of the next engine call.
    prompt = s.engine.prompts[1]
    for r in results:
        assert r.output in prompt


def test_max_turns_stops_with_well_formed_history(home, repo, m3):
    looping = m3.calls(m3.invoke("list_dir", path="."))
    script = [looping] * 5

    s, _, done = m3.one_turn(home, repo, script, "loop forever", max_turns=2)
    assert done.reason == "max_turns"
    assert s.engine.remaining == 3
    # Every call has its result, so the conversation can continue.
    calls = [c.id for m in s.messages for c in m.tool_calls]
    results = [m.tool_call_id for m in s.messages if m.role == "tool"]
    assert calls == results and len(calls) == 2


def test_max_tool_calls_answers_every_call(home, repo, m3):
    script = [m3.calls(*[m3.invoke("list_dir", path=".") for _ in range(3)])]

    s, seen, done = m3.one_turn(home, repo, script, "many", max_tool_calls=2)
    assert done.reason == "max_tool_calls"
    tool_msgs = [m for m in s.messages if m.role == "tool"]
    assert len(tool_msgs) == 3 and "limit" in tool_msgs[2].content


def test_engine_error_ends_the_turn_with_an_error_event(home, repo, m3):
    async def go():
        s = m3.make_session(home, repo, [])  # an empty script: the first call fails
        seen, done = await m3.drive(s, "hello")
        await s.close()
        return seen, done

    seen, done = m3.run(go())
    assert done.reason == "error"
    errors = [e for e in seen if isinstance(e, ev.Error)]
    assert errors and "no reply left" in errors[0].message and errors[0].kind == "engine"


def test_log_holds_every_message_and_event(home, repo, m3):
    script = [m3.calls(m3.invoke("list_dir", path=".")), m3.answer("ok")]

    s, _, _ = m3.one_turn(home, repo, script, "look")
    lines = [json.loads(x) for x in s.conversation.path.read_text().splitlines()]
    assert lines[0]["kind"] == "session" and lines[0]["id"] == s.id
    kinds = {(x["kind"], x.get("event", {}).get("type")) for x in lines}
    assert ("event", "tool_call_finished") in kinds and ("event", "turn_complete") in kinds
    assert ("event", "content_delta") not in kinds  # deltas live in the assistant message
    loaded = Conversation.load(home / "sessions", s.id)
    assert loaded.messages == s.messages


def test_bad_attachment_refuses_the_turn_and_the_session_goes_on(home, repo, m3, tmp_path):
    from m3agent.engine.api import MediaPart
    from PIL import Image

    img = tmp_path / "pic.png"
    Image.new("RGB", (32, 32), (0, 0, 255)).save(img)

    async def go():
        s = m3.make_session(home, repo, [m3.answer("blue")])
        bad = (MediaPart("image", str(tmp_path / "missing.png")),)
        seen, done = await m3.drive(s, "colour?", media=bad)
        _, ok = await m3.drive(s, "colour?", media=(MediaPart("image", str(img)),))
        await s.close()
        return s, seen, done, ok

    s, seen, done, ok = m3.run(go())
    assert done.reason == "error"
    err = [e for e in seen if isinstance(e, ev.Error)][0]
    assert err.kind == "usage" and "missing.png" in err.message
    assert ok.reason == "done" and ok.answer == "blue"
    users = [m for m in s.messages if m.role == "user"]
    assert len(users) == 1 and users[0].media[0].path == str(img)
    assert "]<]image[>[" in s.engine.prompts[0]  # the renderer placed the image token
