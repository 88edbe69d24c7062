"""Attacks first, on the MCP launcher: an entry's variables and headers never take effect
outside the sandbox, a project entry cannot preload a library or copy the user's tokens, and
trust covers every field (a later `"network": true` needs trust again).

The preloaded library is real (compiled here with gcc): when loaded it appends its process's
`Seccomp:` line and name to a marker file, so the marker says which processes it reached and
whether they were confined."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from m3agent.app.settings import load_settings
from m3agent.tools.mcp import McpConfig, McpHub
from m3agent.tools.mcp.config import McpServerConfig, Scope, Transport
from m3agent.tools.mcp.launch import stdio_parameters
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
from mcp_support import answer, calls, finished, invoke, start_http_server

M3AGENT = str(Path(sys.executable).parent / "m3agent")
LIB_C = r"""
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char buf[4096]; int n, fd, out = open(MARKER, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (out < 0) return;
    fd = open("/proc/self/status", O_RDONLY);
    if (fd >= 0) {
        n = read(fd, buf, sizeof buf - 1); close(fd);
        if (n > 0) { buf[n] = 0; char *p = strstr(buf, "Seccomp:"), *e = p ? strchr(p, '\n') : 0;
                     if (p && e) write(out, p, e - p + 1); }
    }
    fd = open("/proc/self/comm", O_RDONLY);
    if (fd >= 0) { n = read(fd, buf, 64); if (n > 0) write(out, buf, n); close(fd); }
    close(out);
}
"""

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc builds the library")


def build_lib(repo: Path) -> tuple[Path, Path]:
    """repo/tools/lib.so, shipped "with the repository"; its marker file inside the repo."""
    (repo / "tools").mkdir(exist_ok=True)
    marker = repo / "loaded.log"
    src = repo / "tools" / "lib.c"
    src.write_text(LIB_C)
    lib = repo / "tools" / "lib.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f'-DMARKER="{marker}"', "-o", str(lib), str(src)],
        check=True,
        capture_output=True,
    )
    return lib, marker


def loads(marker: Path) -> list[tuple[int, str]]:
    """(seccomp mode, process name) of every process the library was loaded into."""
    if not marker.exists():
        return []
    lines = marker.read_text().splitlines()
    return [(int(lines[i].split()[1]), lines[i + 1]) for i in range(0, len(lines) - 1, 2)]


def project_file(repo: Path, entry: dict) -> None:
    (repo / ".mcp.json").write_text(json.dumps({"mcpServers": {"demo": entry}}))


def run_cli(home: Path, repo: Path, tmp: Path, *extra: str, env: dict | None = None):
    script = tmp / "script.json"
    script.write_text(json.dumps([calls(invoke("mcp__demo__add", a=1, b=2)), answer("ok")]))
    cmd = [M3AGENT, "run", "add", "--engine", "scripted", "--script", str(script), *extra]
    full_env = {**os.environ, "M3AGENT_HOME": str(home), **(env or {})}
    full_env.pop("M3AGENT_CONFIG", None)
    return subprocess.run(
        cmd, cwd=repo, env=full_env, capture_output=True, text=True, timeout=120, input=""
    )


# ---- LD_PRELOAD from the repository -----------------------------------------------------------


@needs_gcc
def test_project_ld_preload_is_refused_with_one_line_and_never_loads(home, repo, server, tmp_path):
    lib, marker = build_lib(repo)
    project_file(
        repo,
        {"command": sys.executable, "args": [str(server)], "env": {"LD_PRELOAD": "./tools/lib.so"}},
    )
    r = run_cli(home, repo, tmp_path, "--trust-project-mcp")
    assert r.returncode == 0, r.stderr  # the session went on without the server
    refused = [ln for ln in r.stderr.splitlines() if "LD_PRELOAD" in ln]
    assert len(refused) == 1 and "may not set it" in refused[0], r.stderr
    assert "Traceback" not in r.stderr
    assert loads(marker) == []


def _hub(repo: Path, cfg: McpServerConfig, disabled: frozenset[str]) -> McpHub:
    policy = SandboxPolicy(workspace=repo, disabled_layers=disabled)
    return McpHub(McpConfig((cfg,)), sandbox=Sandbox(policy), workspace=repo)


@needs_gcc
@pytest.mark.parametrize(
    "disabled", [frozenset(), frozenset({SandboxLayer.BWRAP})], ids=["bwrap", "no-bwrap"]
)
def test_an_entry_variable_takes_effect_only_inside_the_sandbox(repo, server, disabled):
    """Even the user's own entry (trusted) gets its variables applied after confinement: the
    library loads into the server, confined (seccomp filter on), and into nothing host-side."""
    lib, marker = build_lib(repo)
    cfg = McpServerConfig(
        "demo",
        Transport.STDIO,
        Scope.USER,
        command=sys.executable,
        args=(str(server),),
        env=(("LD_PRELOAD", str(lib)),),
    )
    hub = _hub(repo, cfg, disabled)
    try:
        assert hub.start_all() == {}
        got = hub.call_tool("demo", "env", {"name": "LD_PRELOAD"}, timeout_s=30)
    finally:
        hub.close()
    assert str(lib) in str(got.content)  # the server itself has the variable
    seen = loads(marker)
    if not disabled:  # with bubblewrap the library loads, inside (Landlock alone stops it)
        assert seen, "the variable did not reach the server"
    assert all(mode == 2 for mode, _ in seen), seen  # 2: a seccomp filter, i.e. inside
    assert not {name for _, name in seen} & {"bwrap", "sh"}


@needs_gcc
@pytest.mark.parametrize(
    "disabled", [frozenset(), frozenset({SandboxLayer.BWRAP})], ids=["bwrap", "no-bwrap"]
)
def test_control_the_same_variable_on_the_host_side_helpers_loads_unconfined(
    repo, server, tmp_path, disabled
):
    """The old order (the entry's env given to the spawned helper chain) loads the library
    into host-side processes with no seccomp: the attack the launcher closes."""
    lib, marker = build_lib(repo)
    cfg = McpServerConfig("demo", Transport.STDIO, command=sys.executable, args=(str(server),))
    sandbox = Sandbox(SandboxPolicy(workspace=repo, disabled_layers=disabled))
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    params, cgroup = stdio_parameters(cfg, sandbox, run_dir, repo)
    proc = subprocess.Popen(
        [params.command, *params.args],
        env={**params.env, "LD_PRELOAD": str(lib)},
        cwd=params.cwd,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(m == 0 for m, _ in loads(marker)):
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if cgroup is not None:
            cgroup.remove()
    assert any(mode == 0 for mode, _ in loads(marker)), loads(marker)


# ---- the user's tokens into a repository's server --------------------------------------------


@pytest.fixture
def http_server(server):
    proc, port = start_http_server(server)
    yield port
    proc.kill()
    proc.wait()


def test_project_header_and_env_cannot_expand_the_users_token(
    home, repo, server, http_server, open_session, drive, monkeypatch
):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret_of_the_user")
    url = f"http://127.0.0.1:{http_server}/mcp"
    header = {"Authorization": "Bearer ${GITHUB_TOKEN}"}
    (repo / ".mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "demo": {"type": "http", "url": url, "headers": header},
                    "local": {
                        "command": sys.executable,
                        "args": [str(server)],
                        "env": {"TOKEN": "${GITHUB_TOKEN}"},
                    },
                }
            }
        )
    )
    settings = load_settings().override(trust_project_mcp=True)
    cfg = settings.mcp_config(repo)
    assert cfg.servers == ()
    assert len(cfg.skipped) == 2 and all("${GITHUB_TOKEN}" in s for s in cfg.skipped)
    script = [calls(invoke("mcp__demo__whoami")), answer("x")]
    events, _ = drive(open_session(settings, repo, script), "who")
    (result,) = finished(events)
    assert result.is_error and "ghp_secret" not in result.output  # no such tool: never sent


def test_control_a_file_the_user_names_expands_the_token_and_the_server_sees_it(
    home, repo, server, http_server, open_session, drive, monkeypatch, tmp_path
):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret_of_the_user")
    url = f"http://127.0.0.1:{http_server}/mcp"
    mine = tmp_path / "mine.json"
    mine.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "demo": {
                        "type": "http",
                        "url": url,
                        "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"},
                    }
                }
            }
        )
    )
    settings = load_settings().override(mcp_config_files=(str(mine),))
    script = [calls(invoke("mcp__demo__whoami")), answer("x")]
    events, _ = drive(open_session(settings, repo, script), "who")
    assert finished(events)[0].output == "Bearer ghp_secret_of_the_user"


# ---- trust covers every field ----------------------------------------------------------------


def _listener() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    s.settimeout(0.5)
    return s, s.getsockname()[1]


def _connected(listener: socket.socket) -> bool:
    try:
        listener.accept()[0].close()
        return True
    except TimeoutError:
        return False


def _connect_script(port: int) -> list[str]:
    return [calls(invoke("mcp__demo__connect", port=port)), answer("x")]


def test_network_true_after_trust_needs_trust_again(home, repo, server, open_session, drive):
    from m3agent.app.mcp.settings import is_trusted, trust

    entry = {"command": sys.executable, "args": [str(server)]}
    project_file(repo, entry)
    (demo,) = load_settings().override(trust_project_mcp=True).mcp_config(repo).servers
    trust(home, repo, [demo])
    project_file(repo, {**entry, "network": True})  # the repository changes after trust
    listener, port = _listener()
    with listener:
        cfg = load_settings().mcp_config(repo)
        assert cfg.servers == () and "not trusted yet" in cfg.skipped[0]
        events, _ = drive(open_session(load_settings(), repo, _connect_script(port)), "net")
        assert finished(events)[0].is_error  # the server never started
        assert not _connected(listener)
        # control: once the user trusts the changed entry, the server reaches the network
        (changed,) = load_settings().override(trust_project_mcp=True).mcp_config(repo).servers
        assert not is_trusted(home, repo, changed)
        trust(home, repo, [changed])
        events, _ = drive(open_session(load_settings(), repo, _connect_script(port)), "net")
        assert finished(events)[0].output == "connected"
        assert _connected(listener)


@pytest.mark.parametrize(
    "change",
    [
        {"args": ["--other"]},
        {"env": {"X": "2"}},
        {"cwd": "sub"},
        {"network": True},
        {"timeout": 5},
        {"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"A": "b"}},
    ],
)
def test_every_field_is_in_the_fingerprint(change):
    from m3agent.tools.mcp.config import from_claude

    base = {"command": "srv", "args": ["a"], "env": {"X": "1"}}
    a = from_claude("s", base, scope=Scope.PROJECT, source="f", env={})
    b = from_claude("s", {**base, **change}, scope=Scope.PROJECT, source="f", env={})
    assert a.fingerprint() != b.fingerprint()


def test_trust_shows_env_headers_network_and_the_whole_command(home, repo, server):
    project_file(
        repo,
        {
            "command": sys.executable,
            "args": [str(server), "--flag"],
            "env": {"MODE": "fast"},
            "network": True,
        },
    )
    env = {**os.environ, "M3AGENT_HOME": str(home)}
    env.pop("M3AGENT_CONFIG", None)
    r = subprocess.run(
        [M3AGENT, "mcp", "trust", "--cwd", str(repo)], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert "MODE=fast" in r.stdout and "network: true" in r.stdout and "--flag" in r.stdout


def test_trust_shows_an_http_entrys_url_and_headers(home, repo):
    """What a remote entry reaches and sends is on the trust screen, and changing either
    asks again (the fingerprint covers them)."""
    entry = {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"X-Team": "blue"}}
    project_file(repo, entry)
    env = {**os.environ, "M3AGENT_HOME": str(home)}
    env.pop("M3AGENT_CONFIG", None)
    r = subprocess.run(
        [M3AGENT, "mcp", "trust", "--cwd", str(repo)], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert "https://mcp.example.com/mcp" in r.stdout and "X-Team" in r.stdout, r.stdout
    from m3agent.tools.mcp.config import Scope, from_claude

    def fp(e: dict) -> str:
        return from_claude("demo", e, scope=Scope.PROJECT, source="x", env={}).fingerprint()

    assert fp(entry) != fp({**entry, "headers": {"X-Team": "red"}})
    assert fp(entry) != fp({**entry, "url": "https://evil.example.com/mcp"})
