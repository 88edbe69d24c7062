"""Point 1 and 5 through the installed console script: `m3agent run --engine native
--offload-experts on` starts a warm `m3agent serve` whose M3 holds its routed experts in host
memory (the server's log says so), and a session resumed in a second process hits that
server's prefix cache like on any native model."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.app.serve.lock import all_locks, pid_alive

pytestmark = pytest.mark.slow
M3AGENT = Path(sys.executable).parent / "m3agent"


def cli(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "M3AGENT_HOME": str(home)}
    env.pop("M3AGENT_CONFIG", None)
    return subprocess.run(
        [str(M3AGENT), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    h.mkdir()
    (h / "config.toml").write_text('max_tokens = 8\ndevice = "cpu"\n')
    yield h
    pids = {lk.pid for lk in all_locks(h)} if (h / "serve").is_dir() else set()
    cli(h, "serve", "--stop", timeout=120)
    for p in pids:  # never leave a server behind
        if pid_alive(p):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


def test_offloaded_warm_server_and_a_resumed_session_hits_its_cache(home, tmp_path, make_repo):
    model = tmp_path / "tiny"
    made = cli(home, "model", "init-tiny", str(model), "--layers", "3", "--experts", "8")
    assert made.returncode == 0, made.stderr
    repo = make_repo({"pkg/a.py": "def f(x):\n    return 2 * x\n", "README.md": "# demo\n"})

    def run(prompt: str, *extra: str) -> dict:
        r = cli(
            home, "run", prompt, "--engine", "native", "--model", str(model), "--cwd",
            str(repo), "--output-format", "json", "--max-turns", "1",
            "--offload-experts", "on", "--expert-form", "int8", *extra,
        )  # fmt: skip
        assert r.returncode in (0, 4), r.stderr  # 4: the random model may call a tool
        return json.loads(r.stdout)

    first = run("hi")
    second = run("and again", "--resume", first["session_id"])
    (lock,) = all_locks(home)
    assert lock.backend == "native" and lock.state == "ready"
    log = next((home / "serve").glob("*.log")).read_text()
    assert "expert offload (forced): routed experts as int8 in host memory" in log
    assert first["usage"]["cached_prompt_tokens"] == 0
    prompt, cached = second["usage"]["prompt_tokens"], second["usage"]["cached_prompt_tokens"]
    assert cached >= first["usage"]["prompt_tokens"] - 128 and prompt - cached < 3 * 128


def test_bad_offload_flags_are_one_line_usage_errors(home, tmp_path):
    r = cli(
        home,
        "run",
        "hi",
        "--engine",
        "native",
        "--model",
        str(tmp_path),
        "--offload-experts",
        "maybe",
    )
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "error: offload_experts must be auto, on or off, got 'maybe'"
    ]
    r = cli(home, "serve", "--model", str(tmp_path), "--expert-form", "int3")
    assert r.returncode == 2 and "expert_form must be auto, int8, int4, mxfp8 or bf16" in r.stderr
