"""The conformance cases of test_vllm_parser_conformance.py: model text, the tools offered,
and the (reasoning, content, tool calls) vLLM 0.33.0 returns for it non-streaming.

Each expected value was derived by reading vLLM 0.33.0's source (the PyPI wheel, not
importable here); the comment on each case names the function/branch that decides it. Paths are
relative to `vllm/`:

  DP  = parser/abstract_parser.py::DelegatingParser._extract_tool_calls (composition, tool_choice)
  RP  = reasoning/minimax_m3_reasoning_parser.py::MiniMaxM3ReasoningParser.extract_reasoning
  BX  = parser/engine/parser_engine.py::ParserEngine._build_extracted_result (name strip, calls)
  FIX = parser/engine/parser_engine.py::ParserEngine._fix_arg_types (second typing pass)
  LEX = parser/engine/incremental_lexer.py + streaming_parser_engine.py (terminals, finish())
  PE  = parser/minimax_m3.py::_parse_element / _parse_invoke_params (element grammar)
  CV  = parser/minimax_m3.py::_convert_element / _convert_object / _container_schema
  CO  = tool_parsers/utils.py::coerce_to_schema_type / extract_types_from_schema

The composed parser is minimax_m3 reasoning + minimax_m3 tools. That reasoning parser is not
engine-based, so DP takes its non-engine branches: tool_choice "none" returns the content as
is, and "no complete tool call" returns the content unstripped, markup included. A request
without tools has tool_choice "none" (entrypoints/openai/chat_completion/protocol.py).
"""

from __future__ import annotations

from m3agent.engine.m3.tokens import NS
from vllm_conformance_markup import SHELL, Case, block, call_case, el, inv

CASES = [
    # ---- no tools offered / tool_choice "none": markup stays content -----------------------
    # DP: tool_choice == "none" and not engine-based -> `return [], content`.
    Case("no-tools", "Sure. " + SHELL, (None, "Sure. " + SHELL, []), tools=()),
    Case("choice-none", "Sure. " + SHELL, (None, "Sure. " + SHELL, []), tool_choice="none"),
    # RP runs on the whole text first: "enabled" reasoning still splits off.
    Case(
        "no-tools-enabled",
        "plan</mm:think>x " + SHELL,
        ("plan", "x " + SHELL, []),
        tools=(),
        mode="enabled",
    ),
    # RP splits think markers even inside tool markup when no tool parsing happens.
    Case(
        "choice-none-think-in-args",
        block(inv('name="run_shell"', el("command", "echo <mm:think>hi</mm:think> ok"))),
        (
            "hi",
            f'{NS}<tool_call>\n{NS}<invoke name="run_shell">{NS}<command>echo '
            f" ok{NS}</command>{NS}</invoke>\n{NS}</tool_call>",
            [],
        ),
        tool_choice="none",
    ),
    # ---- invoke names with surrounding spaces: BX strips `slot.name`, the schema lookup too
    Case(
        "name-spaces-dq",
        block(inv('name=" run_shell "', el("timeout", "30"))),
        (None, None, [("run_shell", {"timeout": 30})]),
    ),
    Case(
        "name-spaces-unquoted",  # LEX: INVOKE_PREFIX_UNQUOTED, the name runs to '>'
        block(inv("name= run_shell ", el("timeout", "7"))),
        (None, None, [("run_shell", {"timeout": 7})]),
    ),
    Case(
        "name-newline",
        block(inv('name="run_shell\n"', el("background", "TRUE"))),
        (None, None, [("run_shell", {"background": True})]),
    ),
    # a name of spaces only is empty after BX's strip: no call, so DP returns the raw content
    Case("name-blank", (t := block(inv('name="   "', el("timeout", "30")))), (None, t, [])),
    Case(  # LEX: any of `">`, `'>`, `>` ends the name, whatever quote opened it
        "name-mixed-quotes",
        block(inv("name='run_shell\"", el("timeout", "1"))),
        (None, None, [("run_shell", {"timeout": 1})]),
    ),
    Case(  # LEX: the first '>' ends the name; PE: the body then starts with prose -> no params
        "name-with-gt",
        block(inv('name="a>b"', el("p", "1"))),
        (None, None, [("a", {})]),
    ),
    # ---- a block with no valid invoke: DP's "no tool calls" branch keeps the raw content ----
    Case(
        "block-prose",
        (t := f"Let me check. {NS}<tool_call>\nI will list files.\n{NS}</tool_call>"),
        (None, t, []),
    ),
    Case("empty-name", (t := block(inv('name=""', el("command", "ls")))), (None, t, [])),
    Case(
        "empty-name-then-valid",  # BX skips the nameless slot, keeps the other
        "x "
        + block(inv('name=""', el("command", "ls")), inv('name="run_shell"', el("command", "pwd"))),
        (None, "x ", [("run_shell", {"command": "pwd"})]),
    ),
    Case(  # _try_extract_name: an empty name is taken from `"name": ".."` in the body, and the
        # body is then read by the element grammar (PE): no elements, no arguments
        "empty-name-json-body",
        block(inv('name=""', '{"name": "run_shell", "arguments": {"timeout": "5"}}')),
        (None, None, [("run_shell", {})]),
    ),
    Case(  # BX: a blank (not empty) name goes to _extract_name_and_args; FIX types "5"
        "blank-name-json-body",
        block(inv('name=" "', '{"name": "run_shell", "arguments": {"timeout": "5"}}')),
        (None, None, [("run_shell", {"timeout": 5})]),
    ),
    Case(
        "two-spaces-header",
        (t := block(inv(' name="run_shell"', el("command", "ls")))),
        (None, t, []),
    ),
    Case("ws-then-prose-block", (t := f"\n {NS}<tool_call>nothing{NS}</tool_call>"), (None, t, [])),
    # DP: required/named with no call and whitespace-only content -> content None (vLLM's
    # message assembly, assemble_chat_message_fields, then sends "" for required/named: that is
    # the response layer's business; ParsedOutput says None for no content throughout)
    Case("required-ws-only", "  \n", (None, None, []), tool_choice="required"),
    Case("required-text", "Hello", (None, "Hello", []), tool_choice="required"),
    Case(  # M3 sets supports_required_and_named=False: named choice parses like auto
        "named-other-tool",
        SHELL,
        (None, None, [("run_shell", {"command": "ls", "timeout": 30})]),
        tool_choice={"type": "function", "function": {"name": "read_file"}},
    ),
    Case("invoke-outside-block", (t := "see " + inv('name="run_shell"', "")), (None, t, [])),
    # ---- truncated blocks ------------------------------------------------------------------
    Case("trunc-after-start", (t := f"ok {NS}<tool_call>\n"), (None, t, [])),
    Case("trunc-partial-invoke", (t := f"ok {NS}<tool_call>\n{NS}<invo"), (None, t, [])),
    Case("trunc-after-prefix", (t := f"ok {NS}<tool_call>{NS}<invoke name="), (None, t, [])),
    Case(  # LEX finish(): TOOL_CALL_END for the open call, with the parameters finished so far
        "trunc-in-body",
        f'ok{NS}<tool_call>\n{NS}<invoke name="read_file">{el("path", "c.py")}{NS}<lines>{NS}<item>5',
        (None, "ok", [("read_file", {"path": "c.py"})]),
    ),
    Case(  # LEX finish() inside the name: the name so far is the call's name
        "trunc-in-name",
        f'{NS}<tool_call>{NS}<invoke name="read_fi',
        (None, None, [("read_fi", {})]),
    ),
    Case(
        "trunc-marker-split",
        (t := f'ok {NS}<tool_call>{NS}<invoke name="x">{NS}</inv'),
        (None, "ok ", [("x", {})]),
    ),
    # ---- `null` for an optional parameter --------------------------------------------------
    # CO: "integer" refuses `null`, the final json.loads fallback gives None
    call_case("set_limit", el("limit", "null"), id="null-int", args={"limit": None}),
    call_case(
        "set_limit", el("label", "NULL"), id="null-typed", args={"label": None}
    ),  # CO: lower()
    call_case("run_shell", el("command", "null"), id="null-string", args={"command": "null"}),
    call_case(
        "unknown_tool", el("x", "null"), id="null-no-schema", args={"x": "null"}
    ),  # CV: no schema
    # ---- a non-integer for an integer parameter: CO's json.loads fallback, then FIX --------
    call_case("run_shell", el("timeout", "4.5"), id="int-float", args={"timeout": 4.5}),
    call_case("run_shell", el("timeout", "4.0"), id="int-float-integral", args={"timeout": 4.0}),
    call_case("run_shell", el("timeout", "abc"), id="int-word", args={"timeout": "abc"}),
    call_case("run_shell", el("timeout", "true"), id="int-bool", args={"timeout": True}),
    call_case("run_shell", el("timeout", "[1]"), id="int-list", args={"timeout": [1]}),
    call_case("run_shell", el("timeout", '"30"'), id="int-quoted", args={"timeout": 30}),  # FIX
    call_case("run_shell", el("timeout", " 30\n"), id="int-spaces", args={"timeout": 30}),
    call_case(
        "set_limit",
        el("ratio", "1e3") + el("alias", "7"),
        id="number",
        args={"ratio": 1000, "alias": 7},
    ),
    # ---- a stray namespace token inside a value: PE returns None, parsing stops ------------
    call_case(
        "run_shell", el("command", f"echo {NS} done") + el("timeout", "5"), id="stray-ns", args={}
    ),
    call_case(
        "read_file",
        el("path", "a.py") + el("opts", f"x{NS}y") + el("lines", "1"),
        id="stray-ns-after-param",
        args={"path": "a.py"},
    ),
    call_case("run_shell", f"{NS}<command>a {NS}<b>{NS}</command>", id="bad-child", args={}),
    # ---- more of the grammar and typing ----------------------------------------------------
    call_case(
        "run_shell",
        el("command", "ls") + " and then " + el("timeout", "5"),
        id="prose-stops",
        args={"command": "ls"},
    ),
    call_case(
        "unknown_tool",
        f"{NS}<cfg>{el('k', 'v')} stray {NS}</cfg>",
        id="mixed-text-raw",
        args={"cfg": {"k": "v", "$text": " stray "}},
    ),
    call_case(
        "unknown_tool",
        f"{NS}<cfg>{el('$text', 'a')}b{NS}</cfg>",
        id="mixed-text-name-taken",
        args={"cfg": {"$text": "a", "$$text": "b"}},
    ),
    call_case("unknown_tool", el("my key", "v"), id="spaced-element-name", args={"my key": "v"}),
    call_case(
        "configure",  # CV: the top level uses `properties` only; nested additionalProperties apply
        f"{NS}<env>{el('A', '1')}{NS}</env>" + el("other", "9"),
        id="additional-properties",
        args={"env": {"A": 1}, "other": "9"},
    ),
    call_case(  # CV _container_schema: array wins over object in a type list
        "set_limit",
        f"{NS}<both>{el('item', '1')}{el('item', '2')}{NS}</both>",
        id="array-wins",
        args={"both": ["1", "2"]},
    ),
    call_case(  # CV: mixed text is one more child, so an array item
        "read_file",
        f"{NS}<lines>{el('item', '1')}junk{NS}</lines>",
        id="array-mixed-text",
        args={"lines": [1, "junk"]},
    ),
    call_case(  # CV: each repeat is converted with the property's own (array) schema
        "read_file",
        el("lines", "[1, 2]") + el("lines", "3"),
        id="repeated-array-prop",
        args={"lines": [[1, 2], 3]},
    ),
    call_case(  # CO: object accepts any JSON value
        "read_file", el("opts", "[1]"), id="object-any-json", args={"opts": [1]}
    ),
    call_case(  # CO extract_types: a typeless anyOf alternative admits string
        "set_limit",
        el("free", "abc") + el("limit", "7"),
        id="anyof-typeless",
        args={"free": "abc", "limit": 7},
    ),
    call_case(
        "set_limit", el("flag", "TRUE"), id="type-alias-case", args={"flag": True}
    ),  # CO aliases
    call_case(  # CV _container_schema ignores allOf: children make an object
        "set_limit",
        f"{NS}<all_of>{el('item', '1')}{el('item', '2')}{NS}</all_of>",
        id="allof-not-container",
        args={"all_of": {"item": ["1", "2"]}},
    ),
    call_case("set_limit", el("all_of", "[1,2]"), id="allof-leaf-types", args={"all_of": [1, 2]}),
    call_case(
        "read_file",
        el("lines", " ") + el("opts", ""),
        id="empty-containers",
        args={"lines": [], "opts": {}},
    ),
    call_case("set_limit", el("tags", " "), id="empty-array-or-string", args={"tags": " "}),
    # ---- reasoning (RP) --------------------------------------------------------------------
    Case(
        "leading-closer-disables",
        "</mm:think>a<mm:think>b</mm:think>c",
        (None, "a<mm:think>b</mm:think>c", []),
    ),
    Case("nested-opener-adaptive", "<mm:think>a<mm:think>b</mm:think>c", ("a<mm:think>b", "c", [])),
    Case(
        "nested-opener-enabled",
        "<mm:think>a<mm:think>b</mm:think>c",
        ("a<mm:think>b", "c", []),
        mode="enabled",
    ),
    Case(
        "closer-later-content",
        "a</mm:think>b<mm:think>c</mm:think>d",
        ("c", "a</mm:think>bd", []),
        mode="disabled",
    ),
    Case("unclosed", "pre<mm:think>rest", ("rest", "pre", [])),
    Case(
        "composed",
        "I need it.</mm:think>Checking." + SHELL,
        ("I need it.", "Checking.", [("run_shell", {"command": "ls", "timeout": 30})]),
        mode="enabled",
    ),
]

IDS = [c.id for c in CASES]
assert len(set(IDS)) == len(IDS)


# ---- where we differ from vLLM on purpose (SPEC Addendum), also under every chunking ---------

DEVIATIONS = [
    # vLLM names this call `a" x="y`; an attribute-like header is malformed here: no call.
    Case("quote-in-name", (t := block(inv('name="a" x="y"', el("p", "1")))), (None, t, [])),
    # vLLM: int("1_000") == 1000; strict integers keep the text.
    call_case("run_shell", el("timeout", "1_000"), id="underscore-int", args={"timeout": "1_000"}),
    # vLLM types the second invoke with the first's schema when the bodies are byte-identical.
    Case(
        "identical-bodies",
        block(
            inv('name="run_shell"', el("timeout", "5")), inv('name="set_limit"', el("timeout", "5"))
        ),
        (None, None, [("run_shell", {"timeout": 5}), ("set_limit", {"timeout": "5"})]),
    ),
    # vLLM splits reasoning off the whole text first, so think markers inside arguments would
    # be cut out of them; once the tool block started they are argument text here.
    Case(
        "think-markers-in-args",
        block(inv('name="run_shell"', el("command", "grep '<mm:think>' f; echo '</mm:think>'"))),
        (None, None, [("run_shell", {"command": "grep '<mm:think>' f; echo '</mm:think>'"})]),
    ),
    # vLLM raises RecursionError (a 500) on absurdly deep JSON text; here it stays a string.
    call_case(
        "read_file",
        el("opts", "[" * 5000 + "]" * 5000),
        id="deep-json",
        args={"opts": "[" * 5000 + "]" * 5000},
    ),
]
