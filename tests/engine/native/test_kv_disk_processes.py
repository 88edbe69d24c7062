"""The disk tier across processes, on a tiny random M3 loaded from its checkpoint (the weights
fingerprint included): two processes computing and writing the same prefix into one folder at
once leave only whole, valid pages, and a fresh process reads them back and generates the same
greedy tokens as an engine without the tier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.engine.native.core.engine_config import EngineConfig
from m3agent.engine.native.core.sampling_params import native_params
from m3agent.engine.native.kvstore.folder import iter_pages
from m3agent.engine.native.llm import LLM

PROMPT = [(i * 37) % 250 + 3 for i in range(300)]  # two full pages and a tail

CHILD = """
import json, sys
from m3agent.engine.native.core.engine_config import EngineConfig
from m3agent.engine.native.core.sampling_params import native_params
from m3agent.engine.native.llm import LLM
model, kv, prompt = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
llm = LLM.from_model_dir(model, config=EngineConfig(kv_disk_dir=kv, max_num_batched_tokens=128))
print("ready", flush=True)
sys.stdin.readline()  # both processes start generating together
(out,) = llm.generate([prompt], native_params(max_tokens=4, ignore_eos=True))
llm.close()
print(json.dumps({"tokens": list(out.token_ids), "restored": out.num_restored_tokens}))
"""


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    path = tmp_path_factory.mktemp("tiny_m3_kv")
    init_tiny(path, TinySpec(layers=2, hidden=128, heads=2, kv_heads=1, experts=2, seed=4))
    return path


def generate(model: Path, kv: Path | None):
    config = EngineConfig(kv_disk_dir=str(kv) if kv else None, max_num_batched_tokens=128)
    llm = LLM.from_model_dir(model, config=config)
    (out,) = llm.generate([PROMPT], native_params(max_tokens=4, ignore_eos=True))
    llm.close()
    return out


def test_two_writers_then_a_fresh_process_reads_back_the_same_tokens(tiny_dir, tmp_path):
    kv = tmp_path / "kv"
    args = [sys.executable, "-c", CHILD, str(tiny_dir), str(kv), json.dumps(PROMPT)]
    procs = [
        subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)

    reference = generate(tiny_dir, None)
    assert [r["tokens"] for r in results] == [list(reference.token_ids)] * 2
    files = iter_pages(kv)
    assert len(files) == 2 and not list(kv.rglob("*.tmp"))

    restored = generate(tiny_dir, kv)  # this process is the fresh one
    assert restored.num_restored_tokens == 256
    assert restored.token_ids == reference.token_ids


WRITER = """
import sys, torch
from pathlib import Path
from m3agent.engine.native.kvstore.disk import DiskTier
from m3agent.engine.native.kvstore.identity import ModelIdentity
from m3agent.engine.native.kvstore.page_file import PageKey
identity = ModelIdentity("w", "float32", "float32", 128, ((1, 8, 0),), "cpu", "1+x", "m")
tier = DiskTier(Path(sys.argv[1]), identity, 1 << 30, 1 << 20)
for i in range(100000):
    key = PageKey(i.to_bytes(16, "little"), None, bytes(1024))
    while not tier.put(key, [torch.full((1 << 20,), i % 251, dtype=torch.uint8)]):
        tier.flush()
    if i == 8:
        tier.flush()
        print("writing", flush=True)
"""


def test_kill_9_mid_write_leaves_only_whole_pages(tmp_path):
    """A writer killed with SIGKILL while it writes 1 MiB pages as fast as it can: every page
    file left is whole and checks out; what it was writing is at most a temporary file."""
    import torch
    from m3agent.engine.native.kvstore.disk import DiskTier
    from m3agent.engine.native.kvstore.identity import ModelIdentity
    from m3agent.engine.native.kvstore.page_file import PageKey

    kv = tmp_path / "kv"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(kv)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
    proc.kill()
    proc.wait(timeout=30)
    identity = ModelIdentity("w", "float32", "float32", 128, ((1, 8, 0),), "cpu", "1+x", "m")
    tier = DiskTier(kv, identity, 1 << 30, 1 << 20)
    written = [int.from_bytes(bytes.fromhex(e.name), "little") for e in iter_pages(kv)]
    assert len(written) >= 9
    for i in written:
        payload = tier.get(PageKey(i.to_bytes(16, "little"), None, bytes(1024)))
        assert payload is not None
        assert torch.frombuffer(payload, dtype=torch.uint8).eq(i % 251).all()
    assert tier.stats.rejected == 0
    tier.close()
