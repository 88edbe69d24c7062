"""Warm by default: `m3agent run --engine native` starts (or reuses) a background `m3agent serve`
and attaches to it, so a `--resume` in a later process finds the session in the prefix cache.

Everything is real: the installed console script, a tiny random M3 on CPU, a server on
127.0.0.1, git repositories built here, a private M3AGENT_HOME per test; every server a test
starts is stopped by its finalizer (and checked gone)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from m3agent.app.serve.lock import all_locks, pid_alive

from ..support.cli import CONSOLE_SCRIPT, cli_env, init_tiny_model, run_cli, start_cli

pytestmark = pytest.mark.slow


def m3agent(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The installed console script (not `python -m`): what a user runs."""
    return run_cli(home, *args, timeout=timeout, command=CONSOLE_SCRIPT)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return init_tiny_model(tmp_path_factory.mktemp("model") / "tiny", command=CONSOLE_SCRIPT)


def _processes_of(home: Path) -> list[int]:
    """Live processes started with this data home (a server that never wrote its lock too)."""
    mark = f"M3AGENT_HOME={home}".encode() + b"\0"
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if mark in environ.read_bytes() and int(environ.parent.name) != os.getpid():
                found.append(int(environ.parent.name))
    return [p for p in found if pid_alive(p)]


def _stop_all(home: Path) -> None:
    if not (home / "serve").is_dir():
        return
    pids = {lk.pid for lk in all_locks(home)} | set(_processes_of(home))
    m3agent(home, "serve", "--stop", timeout=120)
    left = [p for p in pids if pid_alive(p)]
    for p in left:  # never leave a server behind, even when --stop failed
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    assert not left, f"servers still running after `serve --stop`: {left}"


@pytest.fixture
def homes(tmp_path):
    """new_home(name) -> a private data home (config: CPU, 8 tokens per call); all servers
    started under any of them are stopped at the end."""
    made: list[Path] = []

    def new_home(name: str = "home", extra: str = "") -> Path:
        home = tmp_path / name
        home.mkdir()
        (home / "config.toml").write_text(f'max_tokens = 8\ndevice = "cpu"\n{extra}')
        made.append(home)
        return home

    yield new_home
    for home in made:
        _stop_all(home)


@pytest.fixture
def workspace(make_repo):
    return make_repo(
        {f"pkg/m{i}.py": f"def f{i}(x):\n    return x * {i}\n" for i in range(4)}
        | {"README.md": "# demo\n"}
    )


def run(home: Path, tiny: Path, cwd: Path, prompt: str, *extra: str) -> tuple[dict, str]:
    r = m3agent(
        home,
        "run",
        prompt,
        "--engine",
        "native",
        "--model",
        str(tiny),
        "--cwd",
        str(cwd),
        "--output-format",
        "json",
        "--max-turns",
        "1",
        *extra,
    )
    assert r.returncode in (0, 4), r.stderr  # 4: the random model may call a tool
    return json.loads(r.stdout), r.stderr


def two_runs(home: Path, tiny: Path, cwd: Path) -> tuple[dict, dict, str, str]:
    first, err1 = run(home, tiny, cwd, "hi")
    second, err2 = run(home, tiny, cwd, "and again", "--resume", first["session_id"])
    return first, second, err1, err2


def test_run_starts_a_server_and_a_resume_hits_its_cache(homes, tiny, workspace):
    home = homes("auto")
    first, second, err1, err2 = two_runs(home, tiny, workspace)
    (lock,) = all_locks(home)
    assert lock.state == "ready" and lock.backend == "native" and pid_alive(lock.pid)
    # the first run says it started a server that stays, and how to stop it
    assert f"started m3agent serve (native, tiny) on {lock.address}, pid {lock.pid}" in err1
    assert "keeps running" in err1 and "m3agent serve --stop" in err1
    assert f"using m3agent serve (native, tiny) on {lock.address}, pid {lock.pid}" in err2
    assert first["usage"]["cached_prompt_tokens"] == 0
    prompt, cached = second["usage"]["prompt_tokens"], second["usage"]["cached_prompt_tokens"]
    # all of the first request's whole 128-token pages and its answer: only the tail recomputed
    assert cached >= first["usage"]["prompt_tokens"] - 128 and prompt - cached < 3 * 128
    ttft_auto = second["usage"]["time_to_first_token_s"]

    # The reference: the same two runs through a server started by hand (`m3agent serve`).
    ref_home = homes("by-hand")
    proc = start_cli(
        ref_home,
        *("serve", "--engine", "native", "--model", str(tiny)),
        command=CONSOLE_SCRIPT,
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not any(lk.state == "ready" for lk in all_locks(ref_home)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.2)
        _, ref, _, ref_err = two_runs(ref_home, tiny, workspace)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert "using m3agent serve" in ref_err
    ttft_ref = ref["usage"]["time_to_first_token_s"]
    figures = {
        "prompt_tokens": prompt,
        "cached_prompt_tokens": cached,
        "resume_ttft_auto_s": round(ttft_auto, 3),
        "resume_ttft_by_hand_s": round(ttft_ref, 3),
        "first_run_ttft_s": first["usage"]["time_to_first_token_s"],
    }
    print("\nwarm resume figures:", json.dumps(figures))
    # within 2x of the in-serve figure (+0.25 s: two busy cores make sub-second times noisy)
    assert ttft_auto <= 2 * ttft_ref + 0.25, figures

    # The server outlives the runs; `serve --stop` ends it and returns when it is gone.
    stopped = m3agent(home, "serve", "--stop")
    assert stopped.returncode == 0 and f"stopped pid {lock.pid}" in stopped.stdout
    assert not pid_alive(lock.pid) and all_locks(home) == []


def test_two_workspaces_starting_at_once_share_one_server(homes, tiny, make_repo):
    home = homes("shared")
    from m3agent.app.settings import load_settings
    from m3agent.app.warm import ensure_server

    settings = load_settings(cli_env(home)).override(engine="native", model=str(tiny))
    got: list = []
    errors: list = []

    def start() -> None:
        try:
            got.append(ensure_server(settings, timeout_s=120))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=start) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert not errors and len(got) == 2
    assert got[0].pid == got[1].pid and got[0].state == "ready"
    assert [lk.pid for lk in all_locks(home)] == [got[0].pid]


def test_in_process_and_warm_false_start_no_server(homes, tiny):
    from m3agent.app.factory import build_engine
    from m3agent.app.settings import load_settings
    from m3agent.engine.backends.native import NativeEngine

    home = homes("cold", extra="warm = false\n")
    settings = load_settings(cli_env(home)).override(engine="native", model=str(tiny))
    assert settings.warm is False
    engine = build_engine(settings, start_server=True)
    try:
        assert isinstance(engine, NativeEngine)
    finally:
        import asyncio

        asyncio.run(engine.close())
    assert not (home / "serve").exists()


def test_a_server_that_cannot_load_is_one_error_line(homes, tmp_path, workspace):
    home = homes("broken")
    bad = tmp_path / "bad-model"
    bad.mkdir()
    (bad / "config.json").write_text("{}")
    (bad / "model.safetensors").write_bytes(b"not safetensors")
    r = m3agent(
        home, "run", "hi", "--engine", "native", "--model", str(bad), "--cwd", str(workspace)
    )
    assert r.returncode == 3, r.stderr
    error = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(error) == 1 and "m3agent serve did not start (log " in error[0]
    # the loader's own reason, not only the log's name (issue 37 item 11)
    assert f"cannot load the native model from {bad}: no tokenizer.json" in error[0]
    assert "--in-process" in error[0]
    assert all_locks(home) == []


def test_the_tui_session_factory_starts_the_server_and_shows_progress(homes, tiny, workspace):
    """The TUI's loading thread calls this factory: its loading line gets the server's and
    the snapshot's messages, and the session runs on the background server."""
    from m3agent.app.settings import load_settings
    from m3agent.app.tui.launch import session_factory
    from m3agent.engine.backends.remote import RemoteEngine

    home = homes("tui")
    settings = load_settings(cli_env(home)).override(engine="native", model=str(tiny))
    lines: list[tuple[str, float | None]] = []
    session = session_factory(settings, workspace, None)(None, lambda *a: lines.append(a))
    try:
        assert isinstance(session.engine, RemoteEngine)
        (lock,) = all_locks(home)
        labels = [label for label, _ in lines]
        assert any(lb.startswith("starting m3agent serve --engine native") for lb in labels)
        assert any(f"pid {lock.pid}" in lb and "m3agent serve --stop" in lb for lb in labels)
        snap = [(lb, f) for lb, f in lines if lb.startswith("repository snapshot:")]
        assert snap and snap[-1][1] == 1.0 and "5/5 files read" in snap[-1][0]
    finally:
        import asyncio

        asyncio.run(session.engine.close())
