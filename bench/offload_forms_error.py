"""Each host expert form's error against bf16, on a full-width M3 built in memory.

The model: the native engine's M3ForCausalLM at M3's MoE width (hidden 6144, expert width 3072,
16 routed experts, top-4, one shared expert), a few MoE layers, a small vocabulary and few
attention heads (they are not what is measured), random weights scaled like a trained model's
(fan_in^-1/2). The bf16 model (its own MoE module) is the baseline. For each form the routed
experts of every MoE layer are converted and computed by `CpuExperts.forward` (the kernel when
it builds), the router and shared expert unchanged. Reported:

- moe_layer: the first MoE layer's routed output on the baseline's own input, against the
  fp32 reference on the bf16 weights (relative L2, cosine);
- logits over a 64-token prompt (one prefill): relative L2 and max abs error against the
  baseline, and next-token agreement (argmax equal at each of the 64 positions).

    python bench/offload_forms_error.py [--layers 2] [--tokens 64] [--out FILE]

Host memory: ~1.8 GB of bf16 experts per layer plus one form's copy at a time.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from m3agent.engine.native.core.attention_metadata import BLOCK_SIZE, AttentionMetadata
from m3agent.engine.native.core.model_api import LayerCache
from m3agent.engine.native.layers.router import route
from m3agent.engine.native.loaders.tiny import TinySpec, tiny_text_config
from m3agent.engine.native.models.m3 import M3ForCausalLM
from m3agent.engine.offload.cpu_experts import CpuExperts, HostExpertLayer
from m3agent.engine.offload.plan import ExpertForm


def build_model(layers: int, experts: int, vocab: int, seed: int) -> M3ForCausalLM:
    spec = TinySpec(
        layers=layers, hidden=6144, heads=4, kv_heads=2, experts=experts, vocab=vocab,
        dense_layers=0, experts_per_tok=4, intermediate=3072, seed=seed,
    )  # fmt: skip
    c = tiny_text_config(spec, eos_id=vocab - 1, bos_id=vocab - 2)
    model = M3ForCausalLM(c, dtype=torch.bfloat16, device="cpu")
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.normal_(0.0, 0.1, generator=g)
            elif name.endswith("e_score_correction_bias"):
                p.normal_(0.0, 0.01, generator=g)
            elif name.endswith("embed_tokens.weight"):
                p.normal_(0.0, 1.0, generator=g)
            else:
                p.normal_(0.0, p.shape[1] ** -0.5, generator=g)
    return model


def prefill(model: M3ForCausalLM, ids: torch.Tensor) -> torch.Tensor:
    t = ids.shape[0]
    pages = -(-t // BLOCK_SIZE)
    caches = []
    for spec in model.cache_specs():
        kv = torch.zeros(
            pages, spec.num_kv_heads, BLOCK_SIZE, 2 * spec.head_dim, dtype=torch.bfloat16
        )
        idx = (
            torch.zeros(pages, BLOCK_SIZE, spec.index_dim, dtype=torch.bfloat16)
            if spec.index_dim
            else None
        )
        caches.append(LayerCache(kv=kv, index=idx))
    md = AttentionMetadata(
        positions=torch.arange(t),
        slot_mapping=torch.arange(t),
        query_start_loc=torch.tensor([0, t], dtype=torch.int32),
        seq_lens=torch.tensor([t], dtype=torch.int32),
        context_lens=torch.tensor([0], dtype=torch.int32),
        block_tables=torch.arange(pages, dtype=torch.int32)[None],
        query_lens_cpu=(t,),
        seq_lens_cpu=(t,),
        context_lens_cpu=(0,),
    )
    return model.compute_logits(model(ids, caches, md))


def moe_layers(model: M3ForCausalLM) -> dict[int, torch.nn.Module]:
    return {i: layer.block_sparse_moe for i, layer in enumerate(model.model.layers) if layer.is_moe}


def host_form(moe, form: ExpertForm) -> HostExpertLayer:
    return HostExpertLayer.from_weights(
        [ex.w1.weight for ex in moe.experts],
        [ex.w3.weight for ex in moe.experts],
        [ex.w2.weight for ex in moe.experts],
        form,
    )


def offloaded_forward(moe, cpu: CpuExperts, layer: int):
    """The MoE with its routed experts on the CPU (router and shared expert as before)."""

    def forward(x: torch.Tensor) -> torch.Tensor:
        logits = torch.nn.functional.linear(x.float(), moe.gate.weight)
        w, ids = route(logits, moe.e_score_correction_bias, moe.top_k, moe.scaling)
        out = cpu.forward(layer, x, ids, w)
        if moe.shared_experts is not None:
            out += moe.shared_experts(x).float()
        return out.to(x.dtype)

    return forward


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--experts", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--forms", default="bf16,int8,mxfp8,int4")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    torch.manual_seed(0)
    model = build_model(a.layers, a.experts, a.vocab, 0)
    moes = moe_layers(model)
    first = min(moes)
    ids = torch.randint(0, a.vocab - 8, (a.tokens,))
    captured = {}

    def capture(module, inputs, output) -> None:  # returns None: the output stays the module's
        captured.setdefault("x", inputs[0].clone())

    hook = moes[first].register_forward_hook(capture)
    base = prefill(model, ids)
    hook.remove()
    x = captured["x"]
    m0 = moes[first]
    w, sel = route(
        torch.nn.functional.linear(x.float(), m0.gate.weight),
        m0.e_score_correction_bias,
        m0.top_k,
        m0.scaling,
    )
    truth = CpuExperts({first: host_form(m0, ExpertForm.BF16)}).reference(first, x, sel, w)
    rows = []
    for name in a.forms.split(","):
        form = ExpertForm(name)
        t0 = time.perf_counter()
        cpu = CpuExperts({i: host_form(m, form) for i, m in moes.items()})
        convert_s = time.perf_counter() - t0
        routed = cpu.forward(first, x, sel, w)
        for i, m in moes.items():
            m.forward = offloaded_forward(m, cpu, i)
        logits = prefill(model, ids)
        for m in moes.values():
            del m.forward  # back to the class's own forward
        d = logits - base
        row = {
            "bench": "offload_forms_error",
            "form": name,
            "path": "kernel" if cpu.uses_kernel else "torch",
            "hidden": 6144, "inter": 3072, "experts": a.experts, "top_k": 4,
            "moe_layers": len(moes), "tokens": a.tokens, "vocab": a.vocab,
            "expert_MB": cpu.layers[first].expert_bytes() / 1e6,
            "moe_layer_rel_l2": ((routed - truth).norm() / truth.norm()).item(),
            "moe_layer_cosine": torch.nn.functional.cosine_similarity(routed.flatten(), truth.flatten(), dim=0).item(),
            "logits_rel_l2": (d.norm() / base.norm()).item(),
            "logits_max_abs": d.abs().max().item(),
            "logits_scale_max_abs": base.abs().max().item(),
            "next_token_agreement": (logits.argmax(-1) == base.argmax(-1)).float().mean().item(),
            "convert_s": convert_s,
        }  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
        del cpu
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
