"""vLLM's own KV connector for KV beyond the GPU (LMCache), as the fake vllm package records
the engine arguments: on only when asked, refused in one line where lmcache is not installed,
sized through LMCache's LMCACHE_* variables (a variable the user set wins)."""

from __future__ import annotations

import os

import pytest
from m3agent.engine.api import EngineUnavailable
from m3agent.engine.backends.vllm import VllmEngine
from m3agent.engine.backends.vllm_args import GpuInfo, VllmOptions

GPU = GpuInfo(count=1, memory_bytes=141 * 10**9, capability=(9, 0), name="H200")
LMCACHE_VARS = (
    "LMCACHE_CHUNK_SIZE",
    "LMCACHE_LOCAL_CPU",
    "LMCACHE_MAX_LOCAL_CPU_SIZE",
    "LMCACHE_LOCAL_DISK",
    "LMCACHE_MAX_LOCAL_DISK_SIZE",
)


@pytest.fixture
def clean_env(monkeypatch):
    for name in LMCACHE_VARS:
        monkeypatch.delenv(name, raising=False)
    yield
    for name in LMCACHE_VARS:  # what the backend set for the engine
        os.environ.pop(name, None)


@pytest.fixture
def lmcache_installed(tmp_path, monkeypatch):
    pkg = tmp_path / "site" / "lmcache"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))


def test_no_connector_unless_asked(vllm, checkpoint, clean_env):
    VllmEngine.from_model_dir(checkpoint("dev", weight_bytes=2 * 10**9), gpus=GPU)
    assert "kv_transfer_config" not in vllm.engine_args[-1]
    assert not any(name in os.environ for name in LMCACHE_VARS)


def test_lmcache_missing_is_one_line(vllm, checkpoint, clean_env):
    path = checkpoint("dev", weight_bytes=2 * 10**9)
    with pytest.raises(EngineUnavailable, match=r"needs the lmcache package .*pip install"):
        VllmEngine.from_model_dir(path, VllmOptions(kv_connector="lmcache"), gpus=GPU)
    assert vllm.engine_args == []


def test_lmcache_with_cpu_and_disk(vllm, checkpoint, clean_env, lmcache_installed, tmp_path):
    os.environ["LMCACHE_MAX_LOCAL_CPU_SIZE"] = "4"  # the user's own setting stays
    opts = VllmOptions(
        kv_connector="lmcache", kv_offload_disk_dir=str(tmp_path / "kv"), kv_offload_disk_gb=100
    )
    engine = VllmEngine.from_model_dir(checkpoint("dev", weight_bytes=2 * 10**9), opts, gpus=GPU)
    assert vllm.engine_args[-1]["kv_transfer_config"] == {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
    }
    assert os.environ["LMCACHE_LOCAL_DISK"] == f"file://{tmp_path / 'kv'}/"
    assert os.environ["LMCACHE_MAX_LOCAL_DISK_SIZE"] == "100"
    assert os.environ["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "4"
    assert any("LMCache" in note for note in engine.plan.notes)


def test_an_unknown_connector_is_refused():
    with pytest.raises(ValueError, match="kv connector 'nixl' is not one of lmcache"):
        VllmOptions(kv_connector="nixl")
