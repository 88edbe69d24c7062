"""`LLM.from_model_dir`, the native engine's one front door, on real tiny checkpoints on disk."""

from __future__ import annotations

import pytest
from m3agent.engine.api import EngineUnavailable
from m3agent.engine.backends.native import NativeEngine
from m3agent.engine.m3.tokenizer import M3Tokenizer
from m3agent.engine.native.core.engine_config import EngineConfig
from m3agent.engine.native.core.sampling_params import native_params
from m3agent.engine.native.llm import LLM
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

from ...support.native import tiny_vl

SMALL = EngineConfig(num_gpu_blocks=16)


@pytest.fixture(scope="module")
def vl_dir(tmp_path_factory):
    return tiny_vl(tmp_path_factory.mktemp("tiny_vl"))


def test_loads_weights_tokenizer_and_the_vision_tower(vl_dir):
    llm = LLM.from_model_dir(vl_dir, config=SMALL)
    assert isinstance(llm.tokenizer, M3Tokenizer)
    assert llm.runner.vision is not None
    [out] = llm.generate([llm.tokenizer.encode("hello")], native_params(max_tokens=3))
    assert out.finished and out.num_generated_tokens == 3 and out.finish_reason == "length"
    text_only = LLM.from_model_dir(vl_dir, config=SMALL, vision=False)
    assert text_only.runner.vision is None
    [again] = text_only.generate([llm.tokenizer.encode("hello")], native_params(max_tokens=3))
    assert again.token_ids == out.token_ids  # the tower never touches a text-only prompt


def test_a_model_without_a_tokenizer_loads_for_token_ids_only(tmp_path):
    init_tiny(tmp_path, TinySpec(layers=1, dense_layers=1))
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(EngineUnavailable, match="no tokenizer.json"):
        LLM.from_model_dir(tmp_path, config=SMALL)
    llm = LLM.from_model_dir(tmp_path, config=SMALL, need_tokenizer=False)
    assert llm.tokenizer is None
    [out] = llm.generate([[5, 6, 7]], native_params(max_tokens=2))
    assert out.num_generated_tokens == 2 and out.text == ""
    # the chat backend goes through the same door and needs M3's tokenizer
    with pytest.raises(EngineUnavailable, match="no tokenizer.json"):
        NativeEngine.from_model_dir(tmp_path, config=SMALL)


@pytest.mark.parametrize(
    ("setup", "kwargs", "message"),
    [
        (lambda d: None, {}, "does not exist"),
        (lambda d: d.mkdir(), {"dtype": "int8"}, "unknown dtype 'int8'"),
        (lambda d: (d.mkdir(), (d / "tokenizer.json").write_text("{")), {}, "cannot load"),
    ],
)
def test_failures_are_one_engine_unavailable_line(tmp_path, setup, kwargs, message):
    d = tmp_path / "model"
    setup(d)
    with pytest.raises(EngineUnavailable, match=message) as e:
        LLM.from_model_dir(d, need_tokenizer=False, **kwargs)
    assert "\n" not in str(e.value)
