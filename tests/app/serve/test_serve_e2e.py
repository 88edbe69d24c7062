"""`m3agent serve --engine native` on a tiny M3 over real HTTP on loopback, with `m3agent run`
attaching to it; every command is a real subprocess."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from m3agent.app.serve.lock import pid_alive

from ...support.cli import init_tiny_model, run_cli, start_cli, wait_ready


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return init_tiny_model(tmp_path_factory.mktemp("model") / "tiny")


def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for i in range(4):
        (root / f"mod{i}.py").write_text(
            f'"""Module {i} of the example."""\n\n\ndef add{i}(x: int) -> int:\n'
            f"    return x + {i}\n"
        )
    (root / "README.md").write_text("# example\n\nA small repository to snapshot.\n")
    return root


def served_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('max_tokens = 8\ndevice = "cpu"\n')
    return home


def run_twice(home: Path, tiny: Path, workspace: Path) -> list[dict]:
    """The usage of the same one-call `run` twice (the second can hit the server's cache)."""
    usages = []
    for _ in range(2):
        r = run_cli(
            home,
            *("run", "Summarise this repository.", "--engine", "native", "--model", str(tiny)),
            *("--cwd", str(workspace), "--output-format", "json", "--max-turns", "1"),
            *("--approval", "never"),
        )
        assert r.returncode in (0, 4), r.stderr
        usages.append(json.loads(r.stdout)["usage"])
    return usages


def test_serve_run_twice_cached_then_stop(tiny, tmp_path):
    home = served_home(tmp_path)
    workspace = repo(tmp_path)
    proc = start_cli(home, "serve", "--engine", "native", "--model", str(tiny))
    try:
        lock = wait_ready(home, proc)
        assert lock["pid"] == proc.pid and lock["model"] == str(tiny.resolve())
        assert lock["host"] == "127.0.0.1" and lock["port"] > 0

        status = run_cli(home, "serve", "--status")
        assert status.returncode == 0 and f"pid {proc.pid}" in status.stdout

        second = run_cli(home, "serve", "--engine", "native", "--model", str(tiny))
        assert second.returncode == 2 and "already running" in second.stderr

        first, again = run_twice(home, tiny, workspace)
        assert first["prompt_tokens"] == again["prompt_tokens"] > 128
        assert first["cached_prompt_tokens"] == 0
        assert again["cached_prompt_tokens"] > 0
        assert again["cached_prompt_tokens"] % 128 == 0  # whole pages of the native cache

        stop = run_cli(home, "serve", "--stop", "--model", str(tiny), timeout=60)
        assert stop.returncode == 0, stop.stderr
        assert f"stopped pid {proc.pid}" in stop.stdout
        # --stop returned once the server's main thread had exited (a zombie to pid_alive);
        # the rest of its threads end within moments (CI once polled between the two)
        assert proc.wait(timeout=10) is not None
        assert proc.wait(timeout=30) == 0
        assert not pid_alive(proc.pid)
        assert list((home / "serve").glob("*.json")) == []
        after = run_cli(home, "serve", "--status")
        assert after.returncode == 3 and "no m3agent server" in after.stdout
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_on_a_unix_socket_then_stop(tiny, tmp_path):
    import httpx

    home = served_home(tmp_path)
    sock = tmp_path / "m3.sock"
    workspace = repo(tmp_path)
    proc = start_cli(
        home, "serve", "--model", str(tiny), "--socket", str(sock), "--served-model-name", "dev"
    )
    try:
        lock = wait_ready(home, proc)
        assert lock["socket"] == str(sock) and lock["port"] is None
        token = (home / "serve" / "token").read_text().strip()
        with httpx.Client(
            transport=httpx.HTTPTransport(uds=str(sock)),
            base_url="http://localhost",
            headers={"Authorization": f"Bearer {token}"},
        ) as c:
            models = c.get("/v1/models").json()
        assert [m["id"] for m in models["data"]] == ["dev"]
        assert models["data"][0]["backend"] == "native"
        # `run` finds the socket server through the lock and talks HTTP over the socket: the
        # second run of the same prompt hits the warm server's prefix cache.
        usages = run_twice(home, tiny, workspace)
        assert usages[0]["cached_prompt_tokens"] == 0
        assert usages[1]["cached_prompt_tokens"] > 0
        assert run_cli(home, "serve", "--stop", timeout=60).returncode == 0
        assert proc.wait(timeout=30) == 0
        assert not sock.exists() and not pid_alive(proc.pid)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_serve_errors_are_one_line(tmp_path):
    home = tmp_path / "home"
    missing = run_cli(home, "serve", "--model", str(tmp_path / "nope"), timeout=60)
    assert missing.returncode == 3 and "nope does not exist" in missing.stderr
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    half = run_cli(home, "serve", "--model", str(tmp_path / "half"), timeout=60)
    assert half.returncode == 3 and "has no *.safetensors weights" in half.stderr
    both = run_cli(home, "serve", "--model", "x", "--port", "1", "--socket", "s", timeout=60)
    assert both.returncode == 2 and "not both" in both.stderr
    assert not list((home / "serve").glob("*.json"))  # no lock left behind by a failure


def test_detach_returns_when_ready_and_stop_ends_it(tiny, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('device = "cpu"\n')
    r = run_cli(home, "serve", "--detach", "--model", str(tiny), timeout=120)
    assert r.returncode == 0, r.stderr
    lock = json.loads(next((home / "serve").glob("*.json")).read_text())
    assert lock["state"] == "ready" and f"pid {lock['pid']}" in r.stdout
    assert pid_alive(lock["pid"])
    try:
        assert run_cli(home, "serve", "--status").returncode == 0
        assert run_cli(home, "serve", "--stop", "--model", str(tiny), timeout=60).returncode == 0
        deadline = time.monotonic() + 10
        while pid_alive(lock["pid"]) and time.monotonic() < deadline:
            time.sleep(0.1)  # the detached server is not our child: init reaps it
        assert not pid_alive(lock["pid"])
    finally:
        if pid_alive(lock["pid"]):
            os.kill(lock["pid"], 9)


def test_detach_reports_a_server_that_fails_to_load(tmp_path):
    home = tmp_path / "home"
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    (bad / "model.safetensors").write_bytes(b"not safetensors")
    r = run_cli(home, "serve", "--detach", "--model", str(bad), timeout=120)
    assert r.returncode == 3
    assert "the server did not start" in r.stderr and "cannot load the native model" in r.stderr
    assert not list((home / "serve").glob("*.json"))
