"""The prompt renderer: M3 layout per thinking mode, tools, tool results, media, checkpoint
jinja templates, and the prefix property that prefix caching relies on."""

from __future__ import annotations

import json

import pytest
from m3agent.engine.api import MediaPart, Message, ToolCall
from m3agent.engine.m3.chat_template import ChatTemplate, render_prompt
from m3agent.engine.m3.output_parser import parse_output
from m3agent.engine.m3.tokenizer import M3Tokenizer
from m3agent.engine.m3.tokens import NS

MODES = ("enabled", "disabled", "adaptive")
PREFIX = {"enabled": "<mm:think>", "disabled": "</mm:think>", "adaptive": ""}


@pytest.mark.parametrize("mode", MODES)
def test_layout_per_mode(mode):
    p = render_prompt([Message("user", "hi")], [], mode)
    assert p.startswith("]~!b[]~b]system\n")
    assert "]~b]developer\nYou are a helpful assistant.[e~[\n" in p
    assert p.endswith("]~b]user\nhi[e~[\n]~b]ai\n" + PREFIX[mode])
    assert p.count("[e~[") == 3
    # the system block names the SESSION's mode, the same whatever the turn's (the turn's
    # lives in the generation prefix, so a per-turn switch keeps the prefix cache); the
    # markers are not written as text there
    system = p.split("[e~[")[0]
    assert "mm:think" not in system
    assert system == render_prompt([Message("user", "hi")], [], "enabled").split("[e~[")[0]
    assert "Session thinking: adaptive." in system
    other = render_prompt([Message("user", "hi")], [], mode, session_thinking_mode="disabled")
    assert "Session thinking: disabled." in other.split("[e~[")[0]
    assert other.endswith("]~b]ai\n" + PREFIX[mode])
    assert not render_prompt(
        [Message("user", "hi")], [], mode, add_generation_prompt=False
    ).endswith("ai\n" + PREFIX[mode])


def test_bad_mode_raises():
    with pytest.raises(ValueError, match="thinking mode"):
        render_prompt([Message("user", "x")], [], "on")


def test_tools_in_developer_block(spec_tools):
    msgs = [Message("system", "Be terse."), Message("user", "go")]
    p = render_prompt(msgs, spec_tools, "adaptive")
    dev = p.split("]~b]developer\n", 1)[1].split("[e~[", 1)[0]
    assert dev.startswith("Be terse.\n\n# Tools\n")
    tool_lines = [line for line in dev.splitlines() if line.startswith("<tool>")]
    assert len(tool_lines) == 3
    for line, tool in zip(tool_lines, spec_tools, strict=True):
        assert line.endswith("</tool>")
        # key order as given, so the prompt never changes while the tools don't
        assert line[len("<tool>") : -len("</tool>")] == json.dumps(
            tool["function"], ensure_ascii=False
        )
        assert json.loads(line[6:-7]) == tool["function"]


def test_non_ascii_tool_kept_utf8():
    tool = {"type": "function", "function": {"name": "f", "description": "lire un fichier é"}}
    assert "lire un fichier é" in render_prompt([Message("user", "x")], [tool], "adaptive")


def test_tool_results_and_media():
    msgs = [
        Message("user", "look", media=(MediaPart("image", "a.png"), MediaPart("video", "b.mp4"))),
        Message("assistant", "", tool_calls=(ToolCall("c1", "f", {}), ToolCall("c2", "g", {}))),
        Message("tool", "out1", tool_call_id="c1", name="f"),
        Message("tool", "out2", tool_call_id="c2", name="g"),
        Message("user", "thanks"),
    ]
    p = render_prompt(msgs, [], "adaptive")
    assert "]~b]user\n]<]image[>[]<]video[>[look[e~[\n" in p
    assert (
        "]~b]tool\n<response>out1</response>\n<response>out2</response>[e~[\n]~b]user\nthanks" in p
    )


def test_rebuilt_assistant_message_parses_back(spec_tools):
    call = ToolCall("c1", "edit_file", {"path": "a.py", "edits": [{"old": "x", "new": "y"}]})
    for mode in MODES:
        msg = Message("assistant", "Editing.", reasoning="need edit", tool_calls=(call,))
        p = render_prompt(
            [Message("user", "u"), msg], spec_tools, mode, add_generation_prompt=False
        )
        body = p.split("]~b]ai\n", 1)[1].removesuffix("[e~[\n")
        # the real template: no newline between the content and the tool-call block
        assert body.startswith("<mm:think>need edit</mm:think>Editing." + NS + "<tool_call>")
        out = parse_output(body, spec_tools, "adaptive")
        assert (out.reasoning, out.content) == ("need edit", "Editing.")
        assert [(c.name, c.arguments) for c in out.tool_calls] == [(call.name, call.arguments)]
    plain = Message("assistant", "ok", thinking_mode="disabled")
    p = render_prompt([Message("user", "u"), plain], [], "enabled", add_generation_prompt=False)
    assert p.endswith("]~b]ai\n</mm:think>ok[e~[\n")


def test_raw_text_is_verbatim_after_its_own_mode_prefix():
    raw = "  weird <b>spacing</b>\n"
    msg = Message(
        "assistant", "ignored", reasoning="ignored", raw_text=raw, thinking_mode="enabled"
    )
    p = render_prompt([Message("user", "u"), msg], [], "disabled", add_generation_prompt=False)
    assert p.endswith("]~b]ai\n<mm:think>" + raw + "[e~[\n")


def _raw_outputs(mode):
    think = {
        "enabled": "\nLet me look.</mm:think>",
        "disabled": "",
        "adaptive": "<mm:think>hm</mm:think>",
    }
    call = (
        f"{NS}<tool_call>\n"
        f'{NS}<invoke name="read_file">{NS}<path>src/a.py{NS}</path>{NS}<lines>{NS}<item>1{NS}</item>'
        f"{NS}</lines>{NS}</invoke>\n"
        f'{NS}<invoke name="run_shell">{NS}<command>ls -la{NS}</command>{NS}</invoke>\n'
        f"{NS}</tool_call>"
    )
    return [
        think[mode] + "I'll read it.\n" + call,
        "\n\nThe file has one line: `x = 1` — done. ✓",
        " Sure" if mode != "enabled" else "ok</mm:think> Sure",
    ]


def assistant_message(out, raw: str, mode: str) -> Message:
    """The assistant turn parse_output read from raw, as the session logs it."""
    return Message(
        "assistant",
        out.content or "",
        reasoning=out.reasoning,
        tool_calls=tuple(out.tool_calls),
        raw_text=raw,
        thinking_mode=mode,
    )


@pytest.mark.parametrize("mode", MODES)
def test_prefix_property_multi_turn(mode, spec_tools):
    tok = M3Tokenizer.default()
    raws = iter(_raw_outputs(mode))
    history = [Message("system", "You are a coding agent."), Message("user", "Read src/a.py")]
    prompts = []

    def assistant_turn():
        prompts.append(render_prompt(history, spec_tools, mode))
        raw = next(raws)
        out = parse_output(raw, spec_tools, mode)
        history.append(assistant_message(out, raw, mode))
        return out

    out = assistant_turn()
    assert [c.name for c in out.tool_calls] == ["read_file", "run_shell"]
    for c in out.tool_calls:
        history.append(Message("tool", f"result of {c.name}\n", tool_call_id=c.id, name=c.name))
    assistant_turn()
    history.append(Message("user", "Now say sure.", media=(MediaPart("image", "x.png"),)))
    assistant_turn()
    history.append(Message("user", "bye"))
    prompts.append(render_prompt(history, spec_tools, mode))

    for a, b in zip(prompts, prompts[1:], strict=False):
        assert b.startswith(a)
        ids_a, ids_b = tok.encode(a), tok.encode(b)
        assert ids_b[: len(ids_a)] == ids_a
        assert tok.decode(ids_b) == b


def test_prefix_property_when_the_mode_changes_every_turn(spec_tools):
    """Thinking mode is switched per turn; earlier turns keep the mode they ran under."""
    tok = M3Tokenizer.default()
    history = [Message("user", "Read src/a.py")]
    prompts = []
    for mode, raw in zip(
        ("enabled", "disabled", "adaptive", "enabled"),
        ("plan</mm:think>one", "two", "<mm:think>hm</mm:think>three", "four</mm:think>five"),
        strict=True,
    ):
        prompts.append(render_prompt(history, spec_tools, mode))
        out = parse_output(raw, spec_tools, mode)
        history.append(assistant_message(out, raw, mode))
        history.append(Message("user", f"next after {mode}"))
    for a, b in zip(prompts, prompts[1:], strict=False):
        ids_a, ids_b = tok.encode(a), tok.encode(b)
        assert ids_b[: len(ids_a)] == ids_a


# ---- checkpoint templates -----------------------------------------------------------------

JINJA = """{{ bos_token }}{% for m in messages %}<{{ m.role }}>
{%- if m.content is string %}{{ m.content }}{% else %}{% for p in m.content %}
{%- if p.type == 'image' %}[IMG]{% elif p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}{% endif %}
{%- if m.tool_calls %}{% for c in m.tool_calls %}|{{ c.function.name }}={{ c.function.arguments | tojson }}{% endfor %}{% endif %}
{%- if m.reasoning_content %}/r={{ m.reasoning_content }}{% endif %}
{{ eos_token }}
{% endfor %}
{%- if tools %}{% for t in tools %}T:{{ t.function | tojson }}
{% endfor %}{% endif %}
{%- if add_generation_prompt %}<ai:{{ thinking_mode }}>{% endif %}"""


def test_jinja_template_from_model_dir(tmp_path, spec_tools):
    # HF conventions: trim_blocks eats the newline after a block tag; tojson keeps key order
    (tmp_path / "chat_template.jinja").write_text(JINJA)
    tpl = ChatTemplate.from_model_dir(tmp_path)
    assert not tpl.is_builtin
    msgs = [
        Message("user", "hé", media=(MediaPart("image", "a.png"),)),
        Message(
            "assistant", "ok", reasoning="r", tool_calls=(ToolCall("1", "f", {"b": 1, "a": "<x>"}),)
        ),
    ]
    p = render_prompt(msgs, spec_tools[:1], "enabled", template=tpl)
    assert p.startswith(']~!b[<user>[IMG]hé[e~[\n<assistant>ok|f={"b": 1, "a": "<x>"}/r=r[e~[\n')
    assert 'T:{"name": "run_shell", "description": "Run a shell command."' in p
    assert p.endswith("<ai:enabled>")
    assert not tpl.render(msgs, [], "disabled", add_generation_prompt=False).endswith(">")


def test_template_from_tokenizer_config_and_builtin_fallback(tmp_path):
    assert ChatTemplate.from_model_dir(tmp_path).is_builtin
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": "X{{ thinking_mode }}"})
    )
    assert ChatTemplate.from_model_dir(tmp_path).render([], [], "adaptive") == "Xadaptive"


@pytest.mark.parametrize(
    ("source", "match"),
    [
        ("{% if %}", "does not compile"),
        ("{{ raise_exception('no system role') }}", "refused the conversation: no system role"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "failed to render"),
        ("{{ strftime_now('%Y') }}", "failed to render"),
    ],
)
def test_template_errors_are_one_line_value_errors(tmp_path, source, match):
    (tmp_path / "chat_template.jinja").write_text(source)
    with pytest.raises(ValueError, match=match) as exc:
        ChatTemplate.from_model_dir(tmp_path).render([Message("user", "x")], [], "adaptive")
    assert "\n" not in str(exc.value)


def test_tools_none_is_no_tools():
    assert render_prompt([Message("user", "x")], None, "adaptive") == render_prompt(
        [Message("user", "x")], [], "adaptive"
    )


def test_media_offsets_keep_content_part_order_and_round_trip():
    m = Message(
        "user",
        "before after",
        media=(MediaPart("image", "a.png", 7), MediaPart("video", "b.mp4", 12)),
    )
    p = render_prompt([m], [], "adaptive")
    assert "]~b]user\nbefore ]<]image[>[after]<]video[>[[e~[\n" in p
    assert Message.from_dict(m.to_dict()) == m
    assert (
        "offset" not in Message("user", "x", media=(MediaPart("image", "a"),)).to_dict()["media"][0]
    )
