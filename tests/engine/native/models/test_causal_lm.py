"""What the native models share (engine/native/models/causal_lm.py): one constructor, the
ModelInfo it reports, and one-line errors for a length or cache count that does not fit."""

from __future__ import annotations

import pytest
import torch
from m3agent.engine.native.loaders.tiny import TinySpec, tiny_text_config
from m3agent.engine.native.models.llama import LlamaConfig, LlamaForCausalLM
from m3agent.engine.native.models.m3 import M3ForCausalLM

from .conftest import make_caches

LLAMA = LlamaConfig(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=512,
    eos_token_id=(2,),
)
M3 = tiny_text_config(TinySpec(), eos_id=2, bos_id=1)


def test_each_model_reports_its_info_and_serves_the_length_it_was_given():
    llama = LlamaForCausalLM(LLAMA, max_model_len=300)
    m3 = M3ForCausalLM(M3)
    assert (llama.info.architecture, llama.info.max_position_embeddings) == ("llama", 300)
    assert (llama.info.eos_token_ids, llama.info.cuda_graphs) == ((2,), False)
    assert m3.info.architecture == "minimax_m3" and m3.info.cuda_graphs
    assert m3.info.max_position_embeddings == M3.max_model_len
    assert m3.info.vocab_size == M3.vocab_size and m3.offload is None


def test_a_length_beyond_the_model_is_a_one_line_error_naming_the_limit():
    with pytest.raises(ValueError, match="^max_model_len 513 exceeds the model's max_position_"):
        LlamaForCausalLM(LLAMA, max_model_len=513)
    over = M3.max_model_len + 1
    with pytest.raises(ValueError, match=f"^max_model_len {over} exceeds .* pass a YaRN"):
        M3ForCausalLM(M3, max_model_len=over)


@pytest.mark.parametrize("model", [LlamaForCausalLM(LLAMA), M3ForCausalLM(M3)])
def test_a_wrong_number_of_layer_caches_is_refused(model):
    caches = make_caches(model, 4)[:-1]
    layers = model.config.num_hidden_layers
    with pytest.raises(ValueError, match=f"got {layers - 1} layer caches for {layers} layers"):
        model.forward(torch.tensor([3]), caches, None)
