"""SPEC §4.2–4.5 tool-call examples and the Addendum's tool-parser pitfalls."""

from __future__ import annotations

import pytest
from m3agent.engine.api import ContentDelta, ToolCallDelta
from m3agent.engine.m3.output_parser import M3OutputParser, parse_output
from m3agent.engine.m3.tokens import NS
from m3agent.engine.m3.xml_args import MAX_DEPTH

EX1 = (
    "Let me list the files.\n"
    f"{NS}<tool_call>\n"
    f'{NS}<invoke name="run_shell">{NS}<command>ls -la src{NS}</command>{NS}<timeout>30{NS}</timeout>'
    f"{NS}<background>false{NS}</background>{NS}</invoke>\n"
    f"{NS}</tool_call>\n"
)
EX2 = (
    f"{NS}<tool_call>\n"
    f'{NS}<invoke name="edit_file">{NS}<path>a.py{NS}</path>\n'
    f"{NS}<edits>{NS}<item>{NS}<old>x = 1{NS}</old>{NS}<new>x = 2{NS}</new>{NS}</item>{NS}</edits>"
    f"{NS}</invoke>\n"
    f'{NS}<invoke name="read_file">{NS}<path>b.py{NS}</path>\n'
    f"{NS}<lines>{NS}<item>10{NS}</item>{NS}<item>20{NS}</item>{NS}</lines>\n"
    f'{NS}<opts>{{"follow": true}}{NS}</opts>{NS}</invoke>\n'
    f"{NS}</tool_call>trailing text is dropped"
)
EX3 = (
    f"{NS}<tool_call>\n"
    f"{NS}<invoke name='unknown_tool'>{NS}<tag>a{NS}</tag>{NS}<tag>b{NS}</tag>{NS}<n>7{NS}</n>"
    f"{NS}<cfg>{NS}<k>v{NS}</k>stray{NS}</cfg>{NS}</invoke>\n"
    f"{NS}</tool_call>"
)
TRUNC = (
    f'ok{NS}<tool_call>\n{NS}<invoke name="read_file">{NS}<path>c.py{NS}</path>'
    f"{NS}<lines>{NS}<item>5"
)
SPACED = (
    f'{NS}<tool_call>{NS}<invoke name="read_file">{NS}<path> spaced {NS}</path>'
    f"{NS}<lines>{NS}</lines>{NS}</invoke>{NS}</tool_call>"
)
ALL_EXAMPLES = [EX1, EX2, EX3, TRUNC, SPACED]


def calls(out):
    return [(c.name, c.arguments) for c in out.tool_calls]


def test_example1_content_and_typed_call(spec_tools):
    out = parse_output(EX1, spec_tools, "adaptive")
    assert out.reasoning is None
    assert out.content == "Let me list the files.\n"
    assert calls(out) == [
        ("run_shell", {"command": "ls -la src", "timeout": 30, "background": False})
    ]
    # typed values really are int / bool, not their string forms
    args = out.tool_calls[0].arguments
    assert type(args["timeout"]) is int and args["background"] is False


def test_example1_streaming_deltas(spec_tools, m3h):
    deltas, _ = m3h.feed_chunks(EX1, spec_tools, "adaptive", [7])
    kinds = [type(d).__name__ for d in deltas]
    assert kinds[-1] == "ToolCallDelta" and kinds.count("ToolCallDelta") == 1
    assert all(isinstance(d, ContentDelta) for d in deltas[:-1])
    assert "".join(d.text for d in deltas[:-1]) == "Let me list the files.\n"


def test_example2_parallel_calls_nested(spec_tools):
    out = parse_output(EX2, spec_tools, "adaptive")
    assert out.content is None
    assert calls(out) == [
        ("edit_file", {"path": "a.py", "edits": [{"old": "x = 1", "new": "x = 2"}]}),
        ("read_file", {"path": "b.py", "lines": [10, 20], "opts": {"follow": True}}),
    ]


def test_example3_unknown_tool_repeated_names_mixed_text(spec_tools):
    out = parse_output(EX3, spec_tools, "adaptive")
    assert calls(out) == [
        ("unknown_tool", {"tag": ["a", "b"], "n": "7", "cfg": {"k": "v", "$text": "stray"}})
    ]


def test_truncation_keeps_finished_params(spec_tools):
    out = parse_output(TRUNC, spec_tools, "adaptive")
    assert out.content == "ok"
    assert calls(out) == [("read_file", {"path": "c.py"})]


def test_values_not_stripped_and_empty_array(spec_tools):
    out = parse_output(SPACED, spec_tools, "adaptive")
    assert calls(out) == [("read_file", {"path": " spaced ", "lines": []})]


@pytest.mark.parametrize("header", ['name="run_shell"', "name='run_shell'", "name=run_shell"])
def test_invoke_name_quoting(spec_tools, header):
    text = f"{NS}<tool_call>{NS}<invoke {header}>{NS}<timeout>5{NS}</timeout>{NS}</invoke>"
    assert calls(parse_output(text, spec_tools, "adaptive")) == [("run_shell", {"timeout": 5})]


@pytest.mark.parametrize(
    "header", ['name="a" x="y"', "name=", 'nam="a"', "", 'name=""', 'name="  "']
)
def test_malformed_invoke_header_is_skipped(spec_tools, header):
    text = (
        f"{NS}<tool_call>{NS}<invoke {header}>{NS}<p>1{NS}</p>{NS}</invoke>\n"
        f'{NS}<invoke name="b">{NS}<q>2{NS}</q>{NS}</invoke>{NS}</tool_call>'
    )
    assert calls(parse_output(text, spec_tools, "adaptive")) == [("b", {"q": "2"})]


def test_unclosed_quote_name_ends_at_gt(spec_tools):
    # vLLM's lexer: any of `">`, `'>`, `>` ends the name, whatever quote opened it
    text = f'{NS}<tool_call>{NS}<invoke name="a>{NS}<p>1{NS}</p>{NS}</invoke>'
    assert calls(parse_output(text, spec_tools, "adaptive")) == [("a", {"p": "1"})]


def test_no_tools_or_tool_choice_none_keeps_markup_as_content(spec_tools):
    for tools, choice in (([], None), (spec_tools, "none")):
        out = parse_output(EX1, tools, "adaptive", tool_choice=choice)
        assert out.tool_calls == [] and out.content == EX1


def test_bad_tool_choice_raises_value_error(spec_tools):
    with pytest.raises(ValueError, match="tool_choice"):
        M3OutputParser(spec_tools, "adaptive", tool_choice="always")
    with pytest.raises(ValueError, match="tool_choice"):
        M3OutputParser(spec_tools, "adaptive", tool_choice={"type": "function"})


def test_not_an_invoke_tag(spec_tools):
    text = f'{NS}<tool_call>{NS}<invoked name="a">{NS}</invoked>{NS}</tool_call>'
    assert calls(parse_output(text, spec_tools, "adaptive")) == []


def test_strict_integers(spec_tools):
    tools = [
        _tool("f", {"n": {"type": "integer"}, "m": {"type": "integer"}, "k": {"type": "integer"}})
    ]
    text = _invoke("f", f"{NS}<n>1_000{NS}</n>{NS}<m> -42 {NS}</m>{NS}<k>4.0{NS}</k>")
    # `1_000` stays text (strict, unlike Python's int()); `4.0` is no integer, so vLLM's
    # last resort reads it as JSON: 4.0
    got = calls(parse_output(text, tools, "adaptive"))
    assert got == [("f", {"n": "1_000", "m": -42, "k": 4.0})]
    assert type(got[0][1]["k"]) is float


def test_each_invoke_typed_by_its_own_schema():
    tools = [_tool("a", {"x": {"type": "integer"}}), _tool("b", {"x": {"type": "string"}})]
    text = (
        f'{NS}<tool_call>{NS}<invoke name="a">{NS}<x>5{NS}</x>{NS}</invoke>'
        f'{NS}<invoke name="b">{NS}<x>5{NS}</x>{NS}</invoke>{NS}</tool_call>'
    )
    assert calls(parse_output(text, tools, "adaptive")) == [("a", {"x": 5}), ("b", {"x": "5"})]


@pytest.mark.parametrize(
    ("schema", "text", "expected"),
    [
        ({"type": ["null", "integer"]}, "null", None),
        ({"type": ["null", "integer"]}, "7", 7),
        ({"type": "number"}, "2.5", 2.5),
        ({"type": "number"}, "3.0", 3),
        ({"type": "number"}, "1e999", "1e999"),  # non-finite rejected
        ({"type": "number"}, "nan", "nan"),
        ({"type": "boolean"}, "TRUE", True),
        ({"type": "boolean"}, "0", False),
        ({"type": "boolean"}, "yes", "yes"),
        ({"type": "object"}, '{"a": [1]}', {"a": [1]}),
        ({"type": "object"}, "[1]", [1]),  # vLLM: object/array accept any JSON
        ({"type": "integer"}, "null", None),  # no type accepts it: read as JSON
        ({"type": "integer"}, "2.5", 2.5),
        ({"type": "string"}, "null", "null"),
        ({"type": "array"}, "[1, 2]", [1, 2]),
        ({"type": "array"}, "  ", []),
        ({"type": "object"}, "\n", {}),
        ({"type": ["array", "string"]}, "", ""),
        ({"enum": [1, 2, 3]}, "2", 2),
        ({"enum": ["a", "b"]}, "2", "2"),
        ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "12", 12),
        ({"oneOf": [{"type": "boolean"}, {"type": "string"}]}, "false", False),
        ({"type": ["integer", "boolean"]}, "1", 1),  # integer outranks boolean
        ({"type": "string"}, "  7 ", "  7 "),
        ({"description": "no type"}, "7", "7"),
    ],
)
def test_coercion_rules(schema, text, expected):
    tools = [_tool("f", {"v": schema})]
    got = calls(parse_output(_invoke("f", f"{NS}<v>{text}{NS}</v>"), tools, "adaptive"))
    assert got == [("f", {"v": expected})]
    assert type(got[0][1]["v"]) is type(expected)


def test_additional_properties_type_nested_unknown_keys_only():
    nested = {"type": "object", "additionalProperties": {"type": "integer"}}
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {**nested, "properties": {"env": nested}},
            },
        }
    ]
    text = _invoke("f", f"{NS}<anything>9{NS}</anything>{NS}<env>{NS}<K>1{NS}</K>{NS}</env>")
    # as vLLM: the top level uses `properties` only, nested objects their additionalProperties
    assert calls(parse_output(text, tools, "adaptive")) == [
        ("f", {"anything": "9", "env": {"K": 1}})
    ]


def test_stray_namespace_token_in_a_value_stops_parsing(spec_tools):
    text = _invoke("run_shell", f"{NS}<command>ls{NS}</command>{NS}<timeout>1{NS}2{NS}</timeout>")
    assert calls(parse_output(text, spec_tools, "adaptive")) == [("run_shell", {"command": "ls"})]


def test_prose_between_parameters_stops_parsing(spec_tools):
    text = _invoke("run_shell", f"{NS}<command>ls{NS}</command> then {NS}<timeout>1{NS}</timeout>")
    assert calls(parse_output(text, spec_tools, "adaptive")) == [("run_shell", {"command": "ls"})]


def test_raw_markup_in_values_is_not_decoded(spec_tools):
    body = "<div>a &amp; b</div> if x > 1 and y < 2: </command>"
    text = _invoke("run_shell", f"{NS}<command>{body}{NS}</command>")
    assert calls(parse_output(text, spec_tools, "adaptive")) == [("run_shell", {"command": body})]


def test_malformed_element_keeps_earlier_params_and_ends_at_invoke_end(spec_tools):
    text = (
        f'{NS}<tool_call>{NS}<invoke name="run_shell">{NS}<command>ls{NS}</command>'
        f"{NS}<timeout>3{NS}</wrong>{NS}<background>true{NS}</background>{NS}</invoke>"
        f'{NS}<invoke name="read_file">{NS}<path>x{NS}</path>{NS}</invoke>{NS}</tool_call>'
    )
    assert calls(parse_output(text, spec_tools, "adaptive")) == [
        ("run_shell", {"command": "ls"}),
        ("read_file", {"path": "x"}),
    ]


def test_nesting_depth_limit(spec_tools):
    def nest(depth):
        inner = "v"
        for _ in range(depth):
            inner = f"{NS}<a>{inner}{NS}</a>"
        return _invoke("f", f"{NS}<ok>1{NS}</ok>{inner}")

    deep = calls(parse_output(nest(MAX_DEPTH), spec_tools, "adaptive"))[0][1]
    assert "a" in deep
    too_deep = calls(parse_output(nest(MAX_DEPTH + 1), spec_tools, "adaptive"))
    assert too_deep == [("f", {"ok": "1"})]


def test_whitespace_only_content_dropped_with_calls_kept_without(spec_tools):
    text = "\n  \n" + _invoke("run_shell", f"{NS}<command>x{NS}</command>")
    out = parse_output(text, spec_tools, "adaptive")
    assert out.content is None and len(out.tool_calls) == 1
    assert parse_output("\n  \n", spec_tools, "adaptive").content == "\n  \n"


def test_content_not_stripped(spec_tools):
    text = "  Sure.  \n" + _invoke("run_shell", "")
    out = parse_output(text, spec_tools, "adaptive")
    assert out.content == "  Sure.  \n"
    assert calls(out) == [("run_shell", {})]


def test_stray_invoke_after_block_still_calls_text_dropped(spec_tools):
    text = (
        _invoke("run_shell", f"{NS}<command>a{NS}</command>")
        + f'{NS}</tool_call> bye {NS}<invoke name="run_shell">{NS}<command>b{NS}</command>{NS}</invoke> tail'
    )
    out = parse_output(text, spec_tools, "adaptive")
    assert out.content is None
    assert [c.arguments["command"] for c in out.tool_calls] == ["a", "b"]


def test_invoke_without_tool_call_block_is_content(spec_tools):
    text = f'see {NS}<invoke name="run_shell">{NS}</invoke>'
    out = parse_output(text, spec_tools, "adaptive")
    assert out.content == text and out.tool_calls == []


def test_partial_markers_at_end_are_flushed_as_content(spec_tools):
    for tail in ["<", "]<]mini", NS, NS + "<tool_ca", "</mm:th"]:
        out = parse_output("answer " + tail, spec_tools, "disabled")
        assert out.content == "answer " + tail


def test_tool_call_ids_and_indices(spec_tools):
    p = M3OutputParser(spec_tools, "adaptive", id_seed=3)
    deltas = [d for d in p.feed(EX2) + p.finish() if isinstance(d, ToolCallDelta)]
    assert [d.index for d in deltas] == [0, 1]
    ids = [d.call.id for d in deltas]
    assert len(set(ids)) == 2
    assert all(i.startswith("call_") and len(i) == 13 and int(i[5:], 16) >= 0 for i in ids)
    again = M3OutputParser(spec_tools, "adaptive", id_seed=3)
    assert [d.call.id for d in again.feed(EX2) if isinstance(d, ToolCallDelta)] == ids
    other = M3OutputParser(spec_tools, "adaptive")
    assert [d.call.id for d in other.feed(EX2) if isinstance(d, ToolCallDelta)] != ids


def test_feed_after_finish_is_an_error(spec_tools):
    p = M3OutputParser(spec_tools, "adaptive")
    p.finish()
    with pytest.raises(ValueError, match="new M3OutputParser"):
        p.feed("x")


def test_bad_tools_and_mode_raise_value_error():
    with pytest.raises(ValueError, match="function name"):
        M3OutputParser([{"type": "function"}], "adaptive")
    with pytest.raises(ValueError, match="thinking mode"):
        M3OutputParser([], "sometimes")


def _tool(name, props):
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": props}},
    }


def _invoke(name, body):
    return f'{NS}<tool_call>\n{NS}<invoke name="{name}">{body}{NS}</invoke>\n{NS}</tool_call>'


def test_num_tool_calls_and_streamed_call_timing(spec_tools):
    p = M3OutputParser(spec_tools, "adaptive", id_seed=1)
    head, tail = EX2.split(f"{NS}</invoke>", 1)
    assert not any(isinstance(d, ToolCallDelta) for d in p.feed(head))
    assert p.num_tool_calls == 0
    # the call arrives whole exactly when its NS</invoke> does
    got = [d for d in p.feed(f"{NS}</invoke>") if isinstance(d, ToolCallDelta)]
    assert [d.call.name for d in got] == ["edit_file"] and p.num_tool_calls == 1
    p.feed(tail)
    p.finish()
    assert p.num_tool_calls == 2


def test_long_value_streams_in_linear_time(spec_tools):
    import time

    value = "x = a > b and c < d\n" * 5000  # 100 kB with many '>' and '<'
    text = _invoke("run_shell", f"{NS}<command>{value}{NS}</command>")
    p = M3OutputParser(spec_tools, "adaptive")
    t0 = time.perf_counter()
    deltas = []
    for i in range(0, len(text), 4):
        deltas += p.feed(text[i : i + 4])
    deltas += p.finish()
    elapsed = time.perf_counter() - t0
    assert [d.call.arguments["command"] for d in deltas if isinstance(d, ToolCallDelta)] == [value]
    assert elapsed < 5.0, f"{elapsed:.2f}s for 100 kB: quadratic re-parsing?"


def test_pathological_values_stay_strings_instead_of_crashing():
    tools = [
        _tool("f", {"n": {"type": "integer"}, "x": {"type": "number"}, "o": {"type": "array"}})
    ]
    huge = "1" * 5000  # longer than Python's int() digit limit
    deep = "[" * 100_000 + "]" * 100_000  # json.loads hits the recursion limit
    text = _invoke("f", f"{NS}<n>{huge}{NS}</n>{NS}<x>{huge}{NS}</x>{NS}<o>{deep}{NS}</o>")
    assert calls(parse_output(text, tools, "adaptive")) == [
        ("f", {"n": huge, "x": huge, "o": deep})
    ]
