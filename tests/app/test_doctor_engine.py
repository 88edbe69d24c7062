"""`m3agent doctor` checks the configured engine: a real server on 127.0.0.1, a real tiny
checkpoint, and the failures a new user meets (nothing listening, wrong model, no directory)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.app.engine_check import check_engine
from m3agent.app.settings import Settings

from ..support.models_server import models_server

EXE = Path(sys.executable).with_name("m3agent")


@pytest.fixture
def server():
    with models_server([{"id": "MiniMaxAI/MiniMax-M3"}]) as url:
        yield url + "/v1"


def _settings(tmp_path, **kw):
    return Settings(home=tmp_path / "home", config_path=tmp_path / "none.toml", **kw)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_remote_server_answers_and_serves_the_model(tmp_path, server):
    rows = check_engine(
        _settings(tmp_path, engine="remote", base_url=server, model="MiniMaxAI/MiniMax-M3")
    )
    assert [(r.name, r.ok) for r in rows] == [("engine", True), ("server", True)]
    wrong = check_engine(_settings(tmp_path, engine="remote", base_url=server, model="other"))
    assert not wrong[-1].ok and "serves MiniMaxAI/MiniMax-M3, not other" in wrong[-1].detail


def test_nothing_listening_is_one_clear_line(tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/v1"
    (row,) = check_engine(_settings(tmp_path, engine="remote", base_url=url))[1:]
    assert not row.ok and "is the server running?" in row.detail and "\n" not in row.detail


def test_native_model_directory_valid_or_named(tmp_path):
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    tiny = init_tiny(tmp_path / "tiny", TinySpec(layers=2, hidden=128, experts=2))
    rows = {r.name: r for r in check_engine(_settings(tmp_path, engine="native", model=str(tiny)))}
    assert rows["torch"].ok and rows["model"].ok and "MiB of weights" in rows["model"].detail
    missing = {
        r.name: r
        for r in check_engine(_settings(tmp_path, engine="native", model=str(tmp_path / "nope")))
    }
    assert not missing["model"].ok and "does not exist" in missing["model"].detail
    none = {r.name: r for r in check_engine(_settings(tmp_path, engine="native"))}
    assert not none["model"].ok and "needs --model" in none["model"].detail


def test_doctor_console_script_reports_the_engine(tmp_path, server):
    env = {
        **os.environ,
        "M3AGENT_HOME": str(tmp_path / "home"),
        "M3AGENT_ENGINE": "remote",
        "M3AGENT_BASE_URL": server,
        "M3AGENT_MODEL": "MiniMaxAI/MiniMax-M3",
    }
    r = subprocess.run(
        [str(EXE), "doctor", "--json", "--no-mcp", "--cwd", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    engine = json.loads(r.stdout)["engine"]
    assert {
        "name": "server",
        "ok": True,
        "detail": f"{server}/models: MiniMaxAI/MiniMax-M3",
    } in engine
    text = subprocess.run(
        [str(EXE), "doctor", "--no-mcp", "--cwd", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    ).stdout
    assert "engine:" in text and "ok    server" in text
