"""Issue 13, class 5: no credential is reachable from a command.

Outside the workspace the home directory is hidden except a read-only toolchain allow-list;
m3agent's data dir is unreadable; no agent or service socket can be connected to, under
$HOME, /tmp or /run; the environment passes by an allow-list; socket families other than
AF_UNIX (and AF_INET/6 with the network on) are refused. Each attempt runs with and without
bubblewrap and names the layer that stopped it; each control runs the same attempt with the
confining layers off and sees it succeed.

The home directory here lives under /var/tmp, outside bubblewrap's private /tmp, so hiding it
is bubblewrap's home tmpfs at work, not the /tmp one.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
from sandbox_support import (
    CONFIGS,
    SECRET,
    action_argv,
    make_sandbox,
    result_of,
    serve_unix,
    unconfined,
    unprobed,
)

AF_NETLINK, AF_PACKET, AF_ALG, AF_VSOCK = 16, 17, 38, 40
SOCK_RAW, SOCK_SEQPACKET = 3, 5
LEAKY_ENV = {
    "DATABASE_URL": "postgres://u:pw@db/x",
    "MYSQL_PWD": "pw",
    "CI_JOB_JWT": "eyJ.x.y",
    "SLACK_WEBHOOK_URL": "https://hooks.example/T/B/x",
    "OPENAI_API_KEY": "sk-leak",
    "HARMLESS_BUT_UNLISTED": "x",
}


@pytest.fixture
def cred(world):
    base = Path(
        tempfile.mkdtemp(
            prefix="m3-cred-", dir="/var/tmp" if os.access("/var/tmp", os.W_OK) else None
        )
    )
    home = base / "home"
    (home / ".config" / "someapp").mkdir(parents=True)
    (home / ".config" / "someapp" / "token.json").write_text(SECRET)
    (home / ".bash_history").write_text(SECRET)
    (home / ".cargo" / "bin").mkdir(parents=True)
    (home / ".cargo" / "bin" / "tool").write_text("toolchain\n")
    (home / ".ssh").mkdir()
    data = base / "m3data"
    (data / "sessions").mkdir(parents=True)
    (data / "sessions" / "s1.jsonl").write_text(SECRET)
    world.home = home
    world.data = data
    yield world
    shutil.rmtree(base, ignore_errors=True)


def _kw(w) -> dict:
    return {"private_paths": (w.data,)}


def _run(sb, argv, env=None):
    r = sb.run(argv, timeout_s=30, env=env)
    assert not r.timed_out and r.started, r.stderr
    return r, result_of(r)


def _unprotected(w) -> Sandbox:
    return unconfined(w, network=True, private_paths=(w.data,))


HIDDEN = {"bwrap": ("bwrap", "ENOENT"), "no-bwrap": ("landlock", "EACCES")}
READS = {
    "home-dotfile": lambda w: w.home / ".bash_history",
    "home-app-token": lambda w: w.home / ".config" / "someapp" / "token.json",
    "data-dir-session-log": lambda w: w.data / "sessions" / "s1.jsonl",
}


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("what", READS)
def test_read_outside_workspace_is_hidden(what, config, cred):
    sb = make_sandbox(config, cred, _kw(cred))
    r, got = _run(sb, action_argv("read", READS[what](cred)))
    layer, err = HIDDEN[config]
    assert layer in r.layers and not got["ok"] and got["errno"] == err, got
    assert SECRET not in r.stdout + r.stderr


@pytest.mark.parametrize("what", READS)
def test_control_read_outside_workspace_unprotected(what, cred):
    _, got = _run(_unprotected(cred), action_argv("read", READS[what](cred)))
    assert got["ok"] and got["data"] == SECRET


@pytest.mark.parametrize("config", CONFIGS)
def test_toolchain_allow_list_is_readable_not_writable(config, cred):
    sb = make_sandbox(config, cred, _kw(cred))
    tool = cred.home / ".cargo" / "bin" / "tool"
    _, got = _run(sb, action_argv("read", tool))
    assert got["ok"] and got["data"] == "toolchain\n", got
    _, got = _run(sb, action_argv("write", tool))
    want = "EROFS" if config == "bwrap" else "EACCES"
    assert not got["ok"] and got["errno"] == want, got
    assert tool.read_text() == "toolchain\n"


# -- agent and service sockets -------------------------------------------------------------


def _socket_places(w) -> dict[str, Path]:
    places = {
        "home": w.home / ".1password" / "agent.sock",
        "tmp": Path(tempfile.gettempdir()) / f"ssh-{uuid.uuid4().hex[:8]}" / "agent.1",
    }
    run = Path("/run") / f"m3agent-test-{uuid.uuid4().hex[:8]}"
    try:
        run.mkdir()
        places["run"] = run / "bus"
    except OSError:
        pass
    return places


@pytest.fixture
def sockets(cred):
    places = _socket_places(cred)
    recs = {}
    for name, path in places.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        recs[name] = (path, serve_unix(path))
    yield recs
    for path, rec in recs.values():
        rec.stop.set()
        shutil.rmtree(path.parent, ignore_errors=True)


# By default seccomp refuses AF_UNIX sockets (EPERM) with or without bubblewrap; with
# allow_unix_sockets bubblewrap's tmpfs over home, /tmp and /run still hides these (ENOENT).
SOCKET_BLOCK = {
    ("bwrap", False): ("seccomp", "EPERM"),
    ("bwrap", True): ("bwrap", "ENOENT"),
    ("no-bwrap", False): ("seccomp", "EPERM"),
    ("no-bwrap", True): ("seccomp", "EPERM"),
}


@pytest.mark.parametrize("opt_in", [False, True], ids=["default", "allow_unix_sockets"])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("where", ["home", "tmp", "run"])
def test_agent_socket_unreachable(where, config, opt_in, cred, sockets):
    if where not in sockets:
        pytest.skip("/run is not writable here")
    path, rec = sockets[where]
    sb = make_sandbox(config, cred, {**_kw(cred), "allow_unix_sockets": opt_in})
    r, got = _run(sb, action_argv("unix_connect", path))
    layer, err = SOCKET_BLOCK[(config, opt_in)]
    assert layer in r.layers and not got["ok"] and got["errno"] == err, got
    time.sleep(0.2)
    assert rec.got == [], f"the agent socket received {rec.got}"


@pytest.mark.parametrize("where", ["home", "tmp", "run"])
def test_control_agent_socket_reachable_unprotected(where, cred, sockets):
    if where not in sockets:
        pytest.skip("/run is not writable here")
    path, rec = sockets[where]
    _, got = _run(_unprotected(cred), action_argv("unix_connect", path))
    assert got["ok"], got
    time.sleep(0.2)
    assert rec.got == [b"escaped"]


@pytest.mark.parametrize("config", CONFIGS)
def test_unix_sockets_inside_the_sandbox_work_with_bwrap_and_opt_in(config, cred):
    """A server and client of the command's own (a test suite's) in the workspace."""
    sb = make_sandbox(config, cred, {**_kw(cred), "allow_unix_sockets": True})
    code = (
        "import socket,os; p='s.sock'; a=socket.socket(socket.AF_UNIX); a.bind(p); a.listen();"
        "b=socket.socket(socket.AF_UNIX); b.connect(p); print('local-unix-ok')"
    )
    r = sb.run(["python3", "-c", code], cwd=cred.ws / "src", timeout_s=30)
    if config == "bwrap":
        assert r.exit_code == 0 and "local-unix-ok" in r.stdout, r.stderr
    else:  # the documented cost of the Landlock-only mode: AF_UNIX is refused altogether
        assert r.exit_code != 0 and "Operation not permitted" in r.stderr, r.stderr


# -- the environment -------------------------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS)
def test_environment_passes_by_allow_list(config, cred):
    sb = make_sandbox(config, cred, {**_kw(cred), "env_allow": ("MY_TOOL_HOME",)})
    env = {**os.environ, **LEAKY_ENV, "MY_TOOL_HOME": "/opt/tool", "LC_ALL": "C.UTF-8"}
    names = [*LEAKY_ENV, "MY_TOOL_HOME", "LC_ALL", "PATH"]
    r, got = _run(sb, action_argv("env", *names), env=env)
    seen = json.loads(got["data"])
    assert SandboxLayer.ENV_SCRUB in r.layers
    assert {k: seen[k] for k in LEAKY_ENV} == dict.fromkeys(LEAKY_ENV), seen
    assert seen["MY_TOOL_HOME"] == "/opt/tool" and seen["LC_ALL"] == "C.UTF-8" and seen["PATH"]
    assert set(LEAKY_ENV) <= set(r.scrubbed_env)


def test_control_environment_unfiltered_unprotected(cred):
    env = {**os.environ, **LEAKY_ENV}
    _, got = _run(_unprotected(cred), action_argv("env", *LEAKY_ENV), env=env)
    assert json.loads(got["data"]) == LEAKY_ENV


# -- socket families ----------------------------------------------------------------------------

FAMILIES = {
    "vsock": (AF_VSOCK, socket.SOCK_STREAM, 0),
    "netlink-route": (AF_NETLINK, SOCK_RAW, 0),
    "netlink-audit": (AF_NETLINK, SOCK_RAW, 9),
    "packet": (AF_PACKET, SOCK_RAW, 0),
    "alg": (AF_ALG, SOCK_SEQPACKET, 0),
}


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("family", FAMILIES)
def test_socket_family_refused(family, config, cred):
    sb = make_sandbox(config, cred, _kw(cred))
    r, got = _run(sb, action_argv("socket_family", *FAMILIES[family]))
    assert SandboxLayer.SECCOMP in r.layers and not got["ok"] and got["errno"] == "EPERM", got


@pytest.mark.parametrize("family", ["vsock", "netlink-audit", "packet", "alg"])
def test_socket_family_refused_with_network_on(family, cred):
    sb = make_sandbox("no-bwrap", cred, {**_kw(cred), "network": True})
    _, got = _run(sb, action_argv("socket_family", *FAMILIES[family]))
    assert not got["ok"] and got["errno"] == "EPERM", got


def test_network_on_keeps_inet_and_netlink_route(cred):
    sb = make_sandbox("no-bwrap", cred, {**_kw(cred), "network": True})
    for fam in (
        (socket.AF_INET, socket.SOCK_STREAM, 0),
        (socket.AF_INET6, socket.SOCK_DGRAM, 0),
        FAMILIES["netlink-route"],
    ):
        _, got = _run(sb, action_argv("socket_family", *fam))
        assert got["ok"], (fam, got)


@pytest.mark.parametrize("family", FAMILIES)
def test_control_socket_family_unprotected(family, cred):
    _, got = _run(_unprotected(cred), action_argv("socket_family", *FAMILIES[family]))
    if not got["ok"] and got["errno"] in ("EAFNOSUPPORT", "EPROTONOSUPPORT", "EINVAL"):
        pytest.skip(f"the kernel has no {family} sockets ({got['errno']})")
    assert got["ok"], got


@pytest.mark.parametrize("tool", ["read_file", "list_dir"])
def test_file_tools_refuse_the_data_dir(tool, cred):
    from m3agent.tools.base import ToolContext
    from m3agent.tools.toolset import default_toolset

    policy = SandboxPolicy(workspace=cred.ws, home=cred.home, private_paths=(cred.data,))
    target = cred.data / "sessions" / ("s1.jsonl" if tool == "read_file" else "")
    r = default_toolset().dispatch(
        tool, {"path": str(target)}, ToolContext(cwd=cred.ws, sandbox=unprobed(policy))
    )
    assert r.is_error and r.metadata.get("blocked_by") == "path_guard", r.output
    assert SECRET not in r.output


def test_control_file_tools_read_the_data_dir_when_not_private(cred):
    from m3agent.tools.base import ToolContext
    from m3agent.tools.toolset import default_toolset

    policy = SandboxPolicy(workspace=cred.ws, home=cred.home, private_paths=())
    r = default_toolset().dispatch(
        "read_file",
        {"path": str(cred.data / "sessions" / "s1.jsonl")},
        ToolContext(cwd=cred.ws, sandbox=unprobed(policy)),
    )
    assert not r.is_error and SECRET in r.output
