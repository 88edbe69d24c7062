"""engine/m3/chat.py, the one chat layer under native, vllm, scripted (and remote's
completions path): request -> ids, text -> deltas, finish reason, usage, stats."""

from __future__ import annotations

import pytest
from m3agent.engine.api import (
    ChatRequest,
    ContentDelta,
    EngineError,
    EngineRequestError,
    Message,
    PromptTooLong,
    ReasoningDelta,
    ToolCallDelta,
    UsageDelta,
)
from m3agent.engine.m3.chat import ChatLayer, finish_reason
from m3agent.engine.m3.tokenizer import M3Tokenizer

from ...support.markup import calls, function_tool, invoke

TOOL = function_tool("ls", path="string")


@pytest.fixture(scope="module")
def tok():
    return M3Tokenizer.default()


def req(mode="adaptive", session="adaptive", text="hi", tools=(TOOL,)):
    return ChatRequest(
        "r",
        (Message("system", "be brief"), Message("user", text)),
        tools=tools,
        thinking_mode=mode,
        session_thinking_mode=session,
    )


def run(layer, request, chunks, reason="stop", **counts):
    turn = layer.start(request, layer.render(request))
    out = [d for c in chunks for d in turn.feed(c)]
    return out + turn.finish(reason, **counts)


def text(out, kind):
    return "".join(d.text for d in out if isinstance(d, kind))


def test_toggle_changes_only_the_generation_prefix(tok):
    layer = ChatLayer(tok)
    ids = {m: layer.render(req(mode=m)).token_ids for m in ("enabled", "disabled", "adaptive")}
    base = ids["adaptive"]
    for mode in ("enabled", "disabled"):
        assert ids[mode][: len(base)] == base  # adaptive adds nothing after `]~b]ai\n`
    # ... while the session's mode is in the first block.
    other = layer.render(req(session="enabled")).token_ids
    first_diff = next(i for i, (a, b) in enumerate(zip(base, other, strict=False)) if a != b)
    assert first_diff < 200


def test_parses_counts_and_maps_finish_reasons(tok):
    layer = ChatLayer(tok)
    call = calls(invoke("ls", path="."), before="ok\n", reasoning="plan")
    out = run(
        layer,
        req(mode="enabled"),
        [call[i : i + 5] for i in range(0, len(call), 5)],
        cached_tokens=128,
        generated_tokens=40,
    )
    assert text(out, ReasoningDelta) == "plan" and text(out, ContentDelta).strip() == "ok"
    assert [d.call.arguments for d in out if isinstance(d, ToolCallDelta)] == [{"path": "."}]
    last = out[-1]
    assert isinstance(last, UsageDelta) and last.finish_reason == "tool_calls"
    assert last.raw_text == call and last.usage.generated_tokens == 40
    assert last.usage.prompt_tokens == len(layer.render(req(mode="enabled")).token_ids)
    out = run(layer, req(), ["again again"], "repetition")
    assert out[-1].finish_reason == "repetition"
    with pytest.raises(EngineError, match="retry"):
        run(layer, req(), ["x"], "error")
    s = layer.stats.get()
    assert (s.requests, s.cached_prompt_tokens) == (3, 128)  # the failed one counted too
    assert finish_reason("length", True) == "length"
    with pytest.raises(EngineError, match="unknown reason"):
        finish_reason("weird", False)


def test_special_tokens_never_reach_content_even_split_across_chunks(tok):
    layer = ChatLayer(tok)
    out = run(layer, req(mode="disabled", tools=()), ["The an", "swer]~", "b] is [e", "~[ 4]"])
    assert text(out, ContentDelta) == "The answer is  4]"
    assert out[-1].raw_text == "The answer]~b] is [e~[ 4]"  # raw text keeps what was generated


def test_raw_turn_passes_text_through(tok):
    layer = ChatLayer(tok)
    turn = layer.start_raw(3)
    out = turn.feed("<mm:think>x]~b]") + turn.finish("length", generated_tokens=2)
    assert text(out, ContentDelta) == "<mm:think>x]~b]"
    assert out[-1].finish_reason == "length" and out[-1].usage.prompt_tokens == 3


def test_render_errors_are_request_errors(tok):
    with pytest.raises(EngineRequestError, match="cannot render"):
        ChatLayer(tok).render(req(mode="sometimes"))
    with pytest.raises(PromptTooLong):
        ChatLayer(tok, max_model_len=20).render(req())


def test_time_to_first_token_is_known_when_tokens_came_without_text(tok):
    """The remote client times the first token by its text: tokens that decode to nothing
    (a random model's special tokens) still give a time, at most the whole request's."""
    layer = ChatLayer(tok)
    turn = layer.start_raw(3)
    usage = (turn.feed("") + turn.finish("length", generated_tokens=2))[-1].usage
    assert usage.time_to_first_token_s is not None
    assert usage.time_to_first_token_s <= usage.total_time_s
    # no tokens at all (cancelled before the first): no time to first token to report
    empty = layer.start_raw(3).finish("abort", generated_tokens=0)[-1].usage
    assert empty.time_to_first_token_s is None
