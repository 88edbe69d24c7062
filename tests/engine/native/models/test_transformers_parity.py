"""The native engine against transformers' own MiniMax M3 (an implementation nobody here wrote).

One tiny random checkpoint (non-default sizes; a dense layer and MoE layers; MSA with top-2 of
5 key blocks, so the indexer really selects) is written by `model init-tiny`'s code, loaded by
the native loader and, renamed, by transformers' `MiniMaxM3VLForCausalLM`. The native side runs
its real paths: LLMEngine, scheduler, paged KV cache with index keys, chunked prefill, prefix
cache and decode. Every position the engine computes is compared with transformers' logits for
the same position (fp32): max |difference| <= 1e-4.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.models.minimax_m3_vl")

from m3agent.engine.native.core.engine_config import EngineConfig  # noqa: E402
from m3agent.engine.native.core.llm_engine import LLMEngine  # noqa: E402
from m3agent.engine.native.core.sampling_params import native_params  # noqa: E402
from m3agent.engine.native.loaders.checkpoint import load_model  # noqa: E402
from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny  # noqa: E402

TOL = 1e-4
PROMPT_LEN = 600  # 5 key blocks of 128
DECODE_STEPS = 6
SPEC = TinySpec(
    layers=3,
    dense_layers=1,
    hidden=96,
    heads=4,
    kv_heads=2,
    head_dim=64,
    experts=5,
    experts_per_tok=2,
    intermediate=40,
    dense_intermediate=72,
    vocab=320,
    topk_blocks=2,
    seed=11,
)


def _helper():
    path = Path(__file__).with_name("hf_m3.py")
    spec = importlib.util.spec_from_file_location("native_model_hf_m3", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


class Recorder:
    """The native model, recording the final hidden state of every position it computes."""

    def __init__(self, model):
        self._model = model
        self.info = model.info
        self.offload = None
        self.model = model.model
        self.hidden: dict[int, torch.Tensor] = {}

    def cache_specs(self):
        return self._model.cache_specs()

    def compute_logits(self, hidden):
        return self._model.compute_logits(hidden)

    def forward(self, input_ids, caches, md, **kw):
        h = self._model.forward(input_ids, caches, md, **kw)
        assert len(md.query_lens_cpu) == 1, "one request at a time"
        for p, row in zip(md.positions.tolist(), h, strict=True):
            self.hidden[p] = row.clone()
        return h

    def logits(self, positions) -> torch.Tensor:
        return self._model.compute_logits(torch.stack([self.hidden[p] for p in positions]))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    hf = _helper()
    path = init_tiny(tmp_path_factory.mktemp("parity_m3"), SPEC)
    native = load_model(path, dtype=torch.float32)
    c = native.config
    assert c.sparse_attention_config.sparse_topk_blocks < -(-PROMPT_LEN // 128)
    assert {c.is_moe_layer(i) for i in range(c.num_hidden_layers)} == {False, True}
    ref = hf.load_hf_model(path, c)
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(3, 250, (PROMPT_LEN,), generator=g).tolist()
    return native, ref, prompt, hf, path


def _reference(ref, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return ref(input_ids=torch.tensor([ids])).logits[0].float()


def _run(native, prompts, max_tokens=1, **cfg):
    rec = Recorder(native)
    engine = LLMEngine(rec, None, EngineConfig(num_gpu_blocks=24, **cfg))
    params = native_params(max_tokens=max_tokens, ignore_eos=True)
    outs = [engine.generate([p], params)[0] for p in prompts]
    return rec, outs


@pytest.fixture(scope="module")
def one_shot_and_decode(setup):
    """The prompt prefilled in one step, then greedy decode steps; transformers' logits for
    the whole sequence (teacher-forced with the tokens the engine picked)."""
    native, ref, prompt, _, _ = setup
    rec, outs = _run(native, [prompt], max_tokens=DECODE_STEPS + 1, max_num_batched_tokens=2048)
    seq = prompt + list(outs[0].token_ids)
    return rec, seq, _reference(ref, seq[:-1])


def _max_diff(rec, ref_logits, positions) -> float:
    return (rec.logits(positions) - ref_logits[positions]).abs().max().item()


def test_one_shot_prefill(one_shot_and_decode):
    rec, _, ref_logits = one_shot_and_decode
    positions = list(range(PROMPT_LEN))
    diff = _max_diff(rec, ref_logits, positions)
    print(f"one-shot prefill: {PROMPT_LEN} positions, max |logit diff| {diff:.2e}")
    assert diff <= TOL


def test_decode_steps(one_shot_and_decode):
    rec, seq, ref_logits = one_shot_and_decode
    # the prefill's last position and each decode step (one new position per step)
    assert sorted(rec.hidden) == list(range(PROMPT_LEN + DECODE_STEPS))
    positions = list(range(PROMPT_LEN - 1, PROMPT_LEN + DECODE_STEPS))
    diff = _max_diff(rec, ref_logits, positions)
    print(f"decode: {DECODE_STEPS} steps, max |logit diff| {diff:.2e}")
    assert diff <= TOL
    # greedy decoding picked transformers' argmax at every step
    assert ref_logits[positions].argmax(-1).tolist() == seq[PROMPT_LEN:]


def test_chunked_prefill_with_prefix_cache_hit(setup, one_shot_and_decode):
    native, _, prompt, _, _ = setup
    _, _, ref_logits = one_shot_and_decode  # causal: the same logits at the prompt positions
    rec, outs = _run(native, [prompt[:400], prompt], max_num_batched_tokens=128)
    assert outs[1].num_cached_tokens == 384  # 3 full pages of the first prompt
    positions = list(range(PROMPT_LEN))  # 0..399 from the first request, 384.. from the second
    assert sorted(rec.hidden) == positions
    diff = _max_diff(rec, ref_logits, positions)
    print(f"chunked prefill (128) + prefix hit (384 cached): max |logit diff| {diff:.2e}")
    assert diff <= TOL


def test_sparse_selection_matters(setup, one_shot_and_decode):
    """Guard: with every block selected, transformers' logits move far beyond the tolerance,
    so the parity above really exercised the block selection."""
    from dataclasses import replace

    native, _, prompt, hf, path = setup
    _, _, ref_logits = one_shot_and_decode
    c = native.config
    sac = replace(c.sparse_attention_config, sparse_topk_blocks=64)
    ref_dense = hf.load_hf_model(path, replace(c, sparse_attention_config=sac))
    late = slice(256, PROMPT_LEN)  # queries with more than two key blocks to choose from
    gap = (ref_logits[late] - _reference(ref_dense, prompt)[late]).abs().max().item()
    print(f"all blocks instead of top-2: max |logit change| {gap:.2e}")
    assert gap > 100 * TOL
