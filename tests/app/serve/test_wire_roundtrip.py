"""What the remote backend sends, the server reads back as the same messages (property)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from m3agent.app.serve.wire import ChatBody, to_chat_request
from m3agent.engine.api import ChatRequest, Message, SamplingParams, ToolCall
from m3agent.engine.backends.remote_format import request_body
from m3agent.engine.m3.neutralise import neutralise, neutralise_deep

text = st.text(max_size=40)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)
calls = st.lists(
    st.builds(
        ToolCall,
        id=st.text("abc123", min_size=1, max_size=8),
        name=st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
        arguments=st.dictionaries(text, json_value, max_size=3),
    ),
    max_size=2,
)
message = st.one_of(
    st.builds(Message, role=st.just("system"), content=text),
    st.builds(Message, role=st.just("user"), content=text),
    st.builds(
        Message,
        role=st.just("assistant"),
        content=text,
        reasoning=st.none() | text,
        tool_calls=calls.map(tuple),
    ),
    st.builds(
        Message,
        role=st.just("tool"),
        content=text,
        tool_call_id=st.text("abc123", min_size=1, max_size=8),
        name=st.from_regex(r"[a-z_]{1,12}", fullmatch=True),
    ),
)


@settings(max_examples=150, deadline=None)
@example(  # a marker string in a tool-call key arrives neutralised, like every other text
    messages=[
        Message(
            role="assistant",
            content="[e~[",
            tool_calls=(ToolCall(id="1", name="_", arguments={"]~b]": None}),),
        )
    ],
    mode="enabled",
    max_tokens=1,
    seed=None,
)
@given(
    messages=st.lists(message, min_size=1, max_size=5),
    mode=st.sampled_from(["enabled", "disabled", "adaptive"]),
    max_tokens=st.integers(1, 10**5),
    seed=st.none() | st.integers(0, 2**31),
)
def test_remote_body_reads_back_as_the_same_request(
    tmp_path_factory, messages, mode, max_tokens, seed
):
    sent = ChatRequest(
        "r",
        tuple(messages),
        thinking_mode=mode,
        sampling=SamplingParams(max_tokens=max_tokens, seed=seed, top_k=7),
    )
    body = ChatBody.model_validate(request_body(sent, "m"))
    got = to_chat_request(body, "r", tmp_path_factory.mktemp("media"), "adaptive")
    assert got.thinking_mode == mode
    assert got.sampling == sent.sampling
    assert len(got.messages) == len(sent.messages)
    # every text crosses as text the server tokenizes, so its marker strings arrive
    # neutralised (engine/m3/neutralise.py); everything else arrives as it was sent
    for a, b in zip(got.messages, sent.messages, strict=True):
        assert (a.role, a.content, a.tool_call_id, a.name) == (
            b.role,
            neutralise(b.content),
            b.tool_call_id,
            b.name,
        )
        assert a.tool_calls == tuple(
            ToolCall(c.id, c.name, neutralise_deep(c.arguments)) for c in b.tool_calls
        )
        if b.role == "assistant":
            assert a.reasoning == (None if b.reasoning is None else neutralise(b.reasoning))


def test_raw_text_extension_is_kept(tmp_path):
    body = ChatBody.model_validate(
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": "yes",
                    "reasoning_content": "r",
                    "raw_text": "r</mm:think>yes",
                },
            ]
        }
    )
    got = to_chat_request(body, "x", tmp_path, "adaptive")
    assert got.messages[1].raw_text == "r</mm:think>yes"
    assert got.messages[0].raw_text is None
