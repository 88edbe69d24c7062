"""Property tests: chunking never changes results; rendered tool calls parse back exactly."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from m3agent.engine.api import ToolCall
from m3agent.engine.m3.chat_template import render_tool_calls
from m3agent.engine.m3.output_parser import parse_output
from m3agent.engine.m3.tokens import NS

MODES = ("enabled", "disabled", "adaptive")
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

FRAGMENTS = [
    "<mm:think>", "</mm:think>", NS, "<tool_call>", "</tool_call>", '<invoke name="run_shell">',
    "<invoke name='read_file'>", "<invoke name=x>", '<invoke name="a" b="c">', "</invoke>",
    "<command>", "</command>", "<lines>", "</lines>", "<item>", "</item>", "<timeout>",
    "</timeout>", "<", ">", "/", "]", "[", "]<]", "a", "ls -la", " ", "\n", "7", "true", "{}",
]  # fmt: skip


def _examples():
    from pathlib import Path

    # the example texts of the two example modules, without importing them as modules
    src = (Path(__file__).parent / "test_tool_parser.py").read_text()
    ns: dict = {}
    start = src.index("EX1 = (")
    end = src.index("ALL_EXAMPLES")
    exec(compile("from m3agent.engine.m3.tokens import NS\n" + src[start:end], "ex", "exec"), ns)
    return [ns[k] for k in ("EX1", "EX2", "EX3", "TRUNC", "SPACED")]


EXAMPLES = _examples()
EXAMPLES += [
    "plan A</mm:think>answer",
    "<mm:think>plan B</mm:think>answer",
    "</mm:think>answer",
    "pre <mm:think>x</mm:think> post",
    f"I need the listing.</mm:think>Checking.{EXAMPLES[0]}",
]

sizes_st = st.lists(st.integers(min_value=1, max_value=24), min_size=1, max_size=12)


def _check_invariant(m3h, text, tools, mode, sizes):
    whole = parse_output(text, tools, mode, id_seed=7)
    deltas_1, _ = m3h.feed_chunks(text, tools, mode, [1])
    deltas_n, _ = m3h.feed_chunks(text, tools, mode, sizes)
    deltas_w, _ = m3h.feed_chunks(text, tools, mode, [max(1, len(text))])
    assert m3h.merged(deltas_1) == m3h.merged(deltas_w) == m3h.merged(deltas_n)
    assert m3h.parse_chunked(text, tools, mode, sizes) == whole
    assert m3h.parse_chunked(text, tools, mode, [1]) == whole


@SETTINGS
@given(idx=st.integers(0, len(EXAMPLES) - 1), mode=st.sampled_from(MODES), sizes=sizes_st)
def test_examples_any_chunking(m3h, idx, mode, sizes):
    _check_invariant(m3h, EXAMPLES[idx], m3h.tools, mode, sizes)


@settings(max_examples=400, deadline=None)
@given(
    parts=st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=40),
    mode=st.sampled_from(MODES),
    sizes=sizes_st,
)
def test_fuzzed_markup_any_chunking(m3h, parts, mode, sizes):
    _check_invariant(m3h, "".join(parts), m3h.tools, mode, sizes)


# ---- generated tool calls: render with to_xml, parse back ----------------------------------

_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=8).filter(
    lambda s: s != "item"
)
_text = (
    st.lists(
        st.sampled_from(list("ab <>/&\"'[]{}\n\t:=é世🎉") + ["]<]", "minimax", "[>["]),
        max_size=20,
    )
    .map("".join)
    .filter(lambda s: NS not in s)
)


def _leaf():
    return st.one_of(
        st.tuples(st.just({"type": "string"}), _text),
        st.tuples(st.just({"type": "integer"}), st.integers(-(10**20), 10**20)),
        st.tuples(
            st.just({"type": "number"}),
            st.floats(allow_nan=False, allow_infinity=False, width=64),
        ),
        st.tuples(st.just({"type": "boolean"}), st.booleans()),
    )


def _extend(children):
    arrays = children.flatmap(
        lambda sv: st.lists(_same_schema_values(sv[0]), max_size=4).map(
            lambda vs: ({"type": "array", "items": sv[0]}, vs)
        )
    )
    objects = st.dictionaries(_names, children, max_size=4).map(
        lambda d: (
            {"type": "object", "properties": {k: s for k, (s, _) in d.items()}},
            {k: v for k, (_, v) in d.items()},
        )
    )
    return st.one_of(arrays, objects)


def _same_schema_values(schema):
    """Values that fit an already drawn schema (so list items share one schema)."""
    t = schema.get("type")
    if t == "string":
        return _text
    if t == "integer":
        return st.integers(-(10**20), 10**20)
    if t == "number":
        return st.floats(allow_nan=False, allow_infinity=False, width=64)
    if t == "boolean":
        return st.booleans()
    if t == "array":
        return st.lists(_same_schema_values(schema["items"]), max_size=3)
    props = schema["properties"]
    return st.fixed_dictionaries({k: _same_schema_values(s) for k, s in props.items()})


_schema_value = st.recursive(_leaf(), _extend, max_leaves=12)
_args = st.dictionaries(_names, _schema_value, max_size=5)


@SETTINGS
@given(
    calls=st.lists(st.tuples(_names, _args), min_size=1, max_size=3),
    content=_text,
    mode=st.sampled_from(MODES),
    sizes=sizes_st,
)
def test_rendered_calls_parse_back(m3h, calls, content, mode, sizes):
    tools, tool_calls = [], []
    for i, (name, args) in enumerate(calls):
        fname = f"{name}_{i}"
        props = {k: s for k, (s, _) in args.items()}
        tools.append(
            {
                "type": "function",
                "function": {"name": fname, "parameters": {"type": "object", "properties": props}},
            }
        )
        tool_calls.append(ToolCall("x", fname, {k: v for k, (_, v) in args.items()}))
    content = content.replace("<mm:think>", "").replace("</mm:think>", "")
    prefix = "thought</mm:think>" if mode == "enabled" else ""
    text = prefix + content + render_tool_calls(tool_calls)
    out = m3h.parse_chunked(text, tools, mode, sizes)
    assert [(c.name, c.arguments) for c in out.tool_calls] == [
        (c.name, c.arguments) for c in tool_calls
    ]
    assert out.content == (content if content.strip() else None)
    assert out == parse_output(text, tools, mode, id_seed=7)


_plain = st.recursive(
    _text, lambda ch: st.dictionaries(_names, ch, min_size=1, max_size=3), max_leaves=8
)


@SETTINGS
@given(args=st.dictionaries(_names, _plain, max_size=4), sizes=sizes_st)
def test_no_schema_strings_and_objects_parse_back(m3h, args, sizes):
    text = render_tool_calls([ToolCall("x", "not_in_tools", args)])
    out = m3h.parse_chunked(text, m3h.tools, "adaptive", sizes)  # tools offered, not this one
    assert [(c.name, c.arguments) for c in out.tool_calls] == [("not_in_tools", args)]
