"""build_engine attaches to a ready server of the same model, and only then."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from m3agent.app.factory import build_engine
from m3agent.app.serve import lock as locks
from m3agent.app.settings import Settings
from m3agent.engine.api import EngineUnavailable
from m3agent.engine.backends.remote import RemoteEngine


@pytest.fixture(autouse=True)
def no_vllm(monkeypatch):
    """Loading instead of attaching shows as vLLM's import failing, installed or not."""
    import sys

    monkeypatch.setitem(sys.modules, "vllm", None)


def model_dir(tmp_path: Path) -> Path:
    d = tmp_path / "m"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"")
    return d


def settings(tmp_path: Path, model: Path, engine: str = "vllm") -> Settings:
    return Settings(
        home=tmp_path / "home", config_path=tmp_path / "none.toml", engine=engine, model=str(model)
    )


def write(tmp_path: Path, model: Path, **kw) -> None:
    lk = locks.ServerLock(
        pid=os.getpid(), model=str(model.resolve()), served_model_name="m", backend="native", **kw
    )
    locks.acquire(tmp_path / "home", lk).close()  # only its JSON matters here


def test_ready_tcp_server_is_attached(tmp_path):
    m = model_dir(tmp_path)
    write(tmp_path, m, host="127.0.0.1", port=4321, state="ready", max_context_tokens=5000)
    engine = build_engine(settings(tmp_path, m))
    assert isinstance(engine, RemoteEngine)
    assert engine.base_url == "http://127.0.0.1:4321/v1" and engine.model == "m"
    assert engine.info().max_context_tokens == 5000
    # the same directory spelled differently is the same model
    other_spelling = settings(tmp_path, m.parent / "." / "m")
    assert isinstance(build_engine(other_spelling), RemoteEngine)


def test_ready_unix_socket_server_is_attached(tmp_path):
    m = model_dir(tmp_path)
    write(tmp_path, m, socket="/tmp/x.sock", state="ready")
    engine = build_engine(settings(tmp_path, m))
    assert isinstance(engine, RemoteEngine) and engine.model == "m"


def test_not_ready_server_is_not_attached(tmp_path):
    m = model_dir(tmp_path)
    write(tmp_path, m, host="127.0.0.1", port=4321, state="loading")  # weights not loaded yet
    with pytest.raises(EngineUnavailable, match="needs vLLM"):  # it tried to load instead
        build_engine(settings(tmp_path, m))


def test_dead_server_lock_is_ignored(tmp_path):
    m = model_dir(tmp_path)
    write(tmp_path, m, host="127.0.0.1", port=4321, state="ready")
    path = locks.lock_path(tmp_path / "home", str(m.resolve()))
    data = json.loads(path.read_text())
    data["pid"] = 2**22 + 12345  # above the kernel's pid_max default: no such process
    path.write_text(json.dumps(data))
    with pytest.raises(EngineUnavailable, match="needs vLLM"):
        build_engine(settings(tmp_path, m))
    assert not path.exists()


def test_attach_false_never_attaches(tmp_path):
    m = model_dir(tmp_path)
    write(tmp_path, m, host="127.0.0.1", port=4321, state="ready")
    with pytest.raises(EngineUnavailable, match="needs vLLM"):
        build_engine(settings(tmp_path, m), attach=False)
