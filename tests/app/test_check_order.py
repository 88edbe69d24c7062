"""Issue 37 items 1 and 11: `m3agent run` (the installed console script) names first what it can
see without a server: a usage mistake (exit 2), then a missing install (exit 3, the install
command), then an unreachable server; and on a machine without bubblewrap it says in one line
what to install (exit 5) instead of running with the sandbox's metadata gap unasked."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from ..support.cli import CONSOLE_SCRIPT, cli_env
from .test_first_run_no_torch import HIDE

SCRIPT = '["<mm:think>Nothing to do.</mm:think>Done: nothing to change."]'


@pytest.fixture
def no_bwrap_path(tmp_path) -> str:
    """A PATH with git and nothing else: bubblewrap and ripgrep are not installed there."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    git = shutil.which("git")
    assert git is not None
    (bin_dir / "git").symlink_to(git)
    return str(bin_dir)


@pytest.fixture
def repo(tmp_path) -> Path:
    repo = tmp_path / "demo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "hello.py").write_text('print("hi")\n')
    return repo


def m3agent(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CONSOLE_SCRIPT, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def one_error_line(r: subprocess.CompletedProcess) -> str:
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_readme_scripted_run_without_bubblewrap_names_the_install(tmp_path, repo, no_bwrap_path):
    script = tmp_path / "script.json"
    script.write_text(SCRIPT)
    env = {**cli_env(tmp_path / "home"), "PATH": no_bwrap_path}
    r = m3agent(env, "run", "--engine", "scripted", "--script", str(script), "hello", cwd=repo)
    assert r.returncode == 5 and r.stdout == ""
    assert "sudo apt-get install bubblewrap" in one_error_line(r)
    assert "--accept-sandbox-gaps" in r.stderr  # what else works (other tests run with it)


def test_native_run_without_torch_names_torch_before_the_sandbox(tmp_path, repo, no_bwrap_path):
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(HIDE)
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    env = {**cli_env(tmp_path / "home"), "PATH": no_bwrap_path, "PYTHONPATH": str(shim)}
    r = m3agent(env, "run", "--engine", "native", "--model", str(model), "hello", cwd=repo)
    line = one_error_line(r)
    assert r.returncode == 3 and "pip install -e '.[native]'" in line and "bubblewrap" not in line


@pytest.fixture
def silent_server():
    """A listening socket that never answers: any connection to it is seen afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        s.settimeout(0)
        yield s


def _contacted(server: socket.socket) -> bool:
    try:
        server.accept()[0].close()
    except BlockingIOError:
        return False
    return True


@pytest.mark.parametrize("mistake", ["cwd", "resume-corrupt"])
def test_local_mistakes_exit_2_before_any_server_contact(tmp_path, repo, silent_server, mistake):
    home = tmp_path / "home"
    (home / "sessions").mkdir(parents=True)
    (home / "sessions" / "broken.jsonl").write_bytes(b"\xff not a session\n")
    flag, named = {
        "cwd": (["--cwd", str(tmp_path / "gone")], "gone does not exist"),
        "resume-corrupt": (["--resume", "broken"], "broken.jsonl"),
    }[mistake]
    port = silent_server.getsockname()[1]
    r = m3agent(
        cli_env(home), "run", "--engine", "remote", "--base-url", f"http://127.0.0.1:{port}/v1",
        "--output-format", "json", *flag, "hello", cwd=repo,
    )  # fmt: skip
    line = one_error_line(r)
    assert r.returncode == 2 and named in line and "cannot reach" not in line
    assert json.loads(r.stdout)["exit_code"] == 2
    assert not _contacted(silent_server)
    assert os.listdir(home / "sessions") == ["broken.jsonl"]  # nothing written


def test_a_bad_flag_with_json_output_still_prints_the_json_object(tmp_path):
    """Issue 37 item 8: docs/cli.md promises the object for a bad flag too."""
    fmt = "--output-format=stream-json"
    r = m3agent(cli_env(tmp_path / "home"), "run", fmt, "--bogus", "hi", cwd=tmp_path)
    assert r.returncode == 2
    assert one_error_line(r) == "error: No such option: --bogus (m3agent run -h for help)"
    obj = json.loads(r.stdout)
    assert obj["type"] == "result" and obj["is_error"] and obj["session_id"] is None
    assert obj["exit_code"] == 2 and obj["errors"] == [
        {"kind": "usage", "message": "No such option: --bogus (m3agent run -h for help)"}
    ]
