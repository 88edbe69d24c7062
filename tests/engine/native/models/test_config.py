"""config.json parsing and validation (SPEC §1.2)."""

from __future__ import annotations

import json

import pytest
from m3agent.engine.m3.config import load_config, parse_config


def test_defaults_are_the_released_model():
    c = parse_config({"model_type": "minimax_m3_vl", "text_config": {}}).text_config
    assert (
        c.hidden_size,
        c.num_hidden_layers,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.head_dim,
        c.rotary_dim,
        c.vocab_size,
    ) == (6144, 60, 64, 4, 128, 64, 200064)
    assert [c.is_sparse_layer(i) for i in (0, 2, 3, 59)] == [False, False, True, True]
    assert [c.is_moe_layer(i) for i in (0, 2, 3, 59)] == [False, False, True, True]
    s = c.sparse_attention_config
    assert (s.sparse_topk_blocks, s.sparse_init_block, s.sparse_local_block) == (16, 0, 1)
    assert c.routed_scaling_factor == 2.0 and c.swiglu_limit == 7.0
    assert c.max_model_len == 524288 and c.rope_scaling is None


def test_bare_text_config_and_yarn_override(tmp_path):
    d = {
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "eos_token_id": [7, 8],
        "rope_scaling": {"type": "yarn", "factor": 2.0},
    }
    (tmp_path / "config.json").write_text(json.dumps(d))
    c = load_config(tmp_path).text_config
    assert c.eos_token_id == (7, 8)
    assert c.rope_scaling.factor == 2.0 and c.max_model_len == 2 * 524288
    assert [c.is_sparse_layer(i) for i in range(4)] == [False, False, False, True]
    assert all(c.is_moe_layer(i) for i in range(4))  # missing moe_layer_freq -> all MoE
    c2 = load_config(tmp_path, rope_scaling_override={"rope_type": "yarn", "factor": 4.0})
    assert c2.text_config.max_model_len == 4 * 524288


@pytest.mark.parametrize(
    "text,field",
    [
        ({"sparse_attention_config": {"sparse_num_index_heads": 8}}, "sparse_num_index_heads"),
        ({"sparse_attention_config": {"sparse_index_dim": 64}}, "sparse_index_dim"),
        ({"num_hidden_layers": 4, "moe_layer_freq": [0, 1]}, "moe_layer_freq"),
        (
            {"num_hidden_layers": 4, "sparse_attention_config": {"sparse_attention_freq": [1] * 5}},
            "sparse_attention_freq",
        ),
        ({"num_attention_heads": 10}, "num_attention_heads"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"rope_scaling": {"rope_type": "linear", "factor": 2}}, "rope_scaling"),
        (
            {"sparse_attention_config": {"sparse_init_block": 10, "sparse_local_block": 10}},
            "sparse_init_block",
        ),
    ],
)
def test_bad_configs_name_the_field(text, field):
    with pytest.raises(ValueError, match=field):
        parse_config({"text_config": text})


def test_missing_and_broken_config_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_config(tmp_path)
