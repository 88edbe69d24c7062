"""The prefill-progress extension of m3agent serve's completions stream: sent only to a client
that asks (stream_options), read back by the remote backend, and a server's odd values
dropped rather than trusted."""

from __future__ import annotations

import asyncio
import json

import pytest
from m3agent.app.serve.completions import CompletionBody, completion_events
from m3agent.engine.api import ContentDelta, PrefillProgress, Usage, UsageDelta
from m3agent.engine.backends.remote_completion import (
    PREFILL_FIELD,
    PREFILL_OPTION,
    completion_body,
    prefill_of,
)

P = PrefillProgress(prompt_tokens=6000, computed_tokens=2048, cached_tokens=0, elapsed_s=1.5)


def _events(options: dict) -> list[dict]:
    async def deltas():
        yield P
        yield ContentDelta("hi")
        yield UsageDelta(Usage(prompt_tokens=6000, cached_prompt_tokens=0, generated_tokens=1))

    body = CompletionBody(prompt=[1, 2], stream=True, stream_options=options)

    async def collect() -> list[str]:
        return [e async for e in completion_events("r1", "m", body, deltas(), lambda e: 500)]

    return [json.loads(e) for e in asyncio.run(collect()) if e != "[DONE]"]


def test_sent_only_when_asked_and_read_back_as_it_was():
    asked = _events({"include_usage": True, PREFILL_OPTION: True})
    chunks = [c for c in asked if PREFILL_FIELD in c]
    assert len(chunks) == 1 and chunks[0]["choices"] == []
    assert prefill_of(chunks[0]) == P
    # control: an OpenAI client that did not ask sees the plain stream only
    plain = _events({"include_usage": True})
    assert not any(PREFILL_FIELD in c for c in plain)

    # the same answer chunks ("created" is the second each stream began: it may tick between)
    def answer(stream: list[dict]) -> list[dict]:
        return [{k: v for k, v in c.items() if k != "created"} for c in stream if c["choices"]]

    assert answer(plain) == answer(asked)


@pytest.mark.parametrize(
    "value",
    [
        "1/2",
        {"prompt_tokens": 10, "computed_tokens": 20, "cached_tokens": 0, "elapsed_s": 1},
        {"prompt_tokens": 10, "computed_tokens": 5, "cached_tokens": 6, "elapsed_s": 1},
        {"prompt_tokens": -1, "computed_tokens": 0, "cached_tokens": 0, "elapsed_s": 1},
        {"prompt_tokens": 10**30, "computed_tokens": 0, "cached_tokens": 0, "elapsed_s": 1},
        {"prompt_tokens": True, "computed_tokens": 0, "cached_tokens": 0, "elapsed_s": 1},
        {"prompt_tokens": 10, "computed_tokens": 5, "cached_tokens": 0, "elapsed_s": "x"},
        {"prompt_tokens": 10, "computed_tokens": 5, "cached_tokens": 0, "elapsed_s": float("nan")},
        {"prompt_tokens": 10, "computed_tokens": 5},
    ],
)
def test_a_servers_odd_values_are_dropped(value):
    assert prefill_of({PREFILL_FIELD: value}) is None


def test_only_our_server_is_asked():
    from m3agent.engine.api import ChatRequest, Message

    req = ChatRequest(request_id="r", messages=(Message("user", "x"),))
    assert PREFILL_OPTION in completion_body(req, "m", [1], prefill_progress=True)["stream_options"]
    assert PREFILL_OPTION not in completion_body(req, "m", [1])["stream_options"]
