"""A completion request holds exactly one non-empty prompt, so every backend reads it alike."""

from __future__ import annotations

import pytest
from m3agent.engine.backends.completion import CompletionEngine, CompletionRequest
from m3agent.engine.backends.remote import RemoteEngine
from m3agent.engine.backends.scripted import ScriptedEngine


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "token ids or text, not both"),
        ({"prompt_token_ids": (1,), "prompt_text": "x"}, "token ids or text, not both"),
        ({"prompt_token_ids": ()}, "this one is empty"),
        ({"prompt_text": ""}, "this one is empty"),
    ],
)
def test_a_request_without_exactly_one_prompt_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CompletionRequest("r", **kwargs)


def test_the_capability_is_declared_by_the_backends_that_have_it():
    assert isinstance(ScriptedEngine([]), CompletionEngine)
    assert not isinstance(RemoteEngine("http://127.0.0.1:9", model="m"), CompletionEngine)
