"""The two launchers: the compiled helper (under bubblewrap) and the Python launcher (without
it, or where no compiler is). Both apply the same host-made plan; each probe here runs
through both and must see the same confinement, and a layer that cannot be applied stops
the command before it runs (exit 125, `started` false)."""

from __future__ import annotations

import json
import marshal
import os
import subprocess

import pytest
from m3agent.tools.sandbox import helper, launch_spec
from m3agent.tools.sandbox.runner import Sandbox
from sandbox_support import make_sandbox

PROBE = r"""
import json, os, resource, socket
out = {"caps": [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]}
out["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)[0] > 0
out["cpu"] = resource.getrlimit(resource.RLIMIT_CPU)
try:
    socket.socket(socket.AF_UNIX); out["unix"] = "allowed"
except OSError as e:
    out["unix"] = e.errno
for name, path in (("outside", OUTSIDE), ("git", GIT)):
    try:
        open(path, "w").write("x"); out[name] = "written"
    except OSError as e:
        out[name] = e.errno
print(json.dumps(out))
"""


def _probe(sb: Sandbox, world) -> dict:
    code = PROBE.replace("OUTSIDE", repr(str(world.outside / "victim.txt"))).replace(
        "GIT", repr(str(world.ws / ".git" / "config"))
    )
    r = sb.run(["python3", "-c", code], cwd=world.ws / "src", timeout_s=30)
    assert r.started and r.exit_code == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_helper_and_python_launcher_confine_alike(world):
    with_helper = make_sandbox("bwrap", world)
    if with_helper.helper is None:
        pytest.skip("no C compiler: the helper cannot be built here")
    python_only = Sandbox(with_helper.policy, with_helper.report, use_helper=False)
    a, b = _probe(with_helper, world), _probe(python_only, world)
    assert a == b, (a, b)
    assert a["caps"] == "0000000000000000" and a["unix"] == 1  # EPERM
    assert a["outside"] != "written" and a["git"] != "written"
    assert a["cpu"] == [20, 22]
    assert (world.outside / "victim.txt").read_text() == "original\n"


def test_helper_used_under_bwrap(world):
    sb = make_sandbox("bwrap", world)
    if sb.helper is None:
        pytest.skip("no C compiler")
    full, _, _ = sb.launch_argv(["true"], world.ws, world.ws.parent / "rd", nproc_watch=False)
    assert str(sb.helper) in full


def test_helper_refuses_to_run_unconfined(world):
    """A plan token the helper cannot apply: exit 125 before the command, nothing ran."""
    exe = helper.build()
    if exe is None:
        pytest.skip("no C compiler")
    marker = world.outside / "ran"
    spec = {"seccomp": b"\x00" * 7}  # not a whole BPF instruction
    r = subprocess.run(
        helper.argv(exe, spec, None, ["touch", str(marker)]), capture_output=True, text=True
    )
    assert r.returncode == 125 and "could not apply a layer" in r.stderr
    assert not marker.exists()


def test_control_helper_runs_the_command_with_a_valid_plan(world):
    exe = helper.build()
    if exe is None:
        pytest.skip("no C compiler")
    marker = world.outside / "ran"
    r = subprocess.run(helper.argv(exe, {}, None, ["touch", str(marker)]), capture_output=True)
    assert r.returncode == 0 and marker.exists()


def test_stale_helper_is_never_run(tmp_path, monkeypatch):
    """The binary is named by its source's hash: an edited helper.c means no helper until
    rebuilt (the Python launcher meanwhile)."""
    src = tmp_path / "helper.c"
    src.write_text(helper.SOURCE.read_text() + "\n/* edited */\n")
    built = helper.build()
    monkeypatch.setattr(helper, "SOURCE", src)
    assert helper.path() is None
    if built is not None:
        assert built.exists()  # the old binary is there, and still not taken


def test_spec_round_trips_through_marshal(world):
    sb = make_sandbox("no-bwrap", world)
    spec = launch_spec.confinement(sb.policy, sb.active_layers(), world.ws, 16)
    assert marshal.loads(bytes.fromhex(launch_spec.encode(spec))) == spec
    assert os.path.isfile(helper.SOURCE)


@pytest.mark.parametrize("config", ["bwrap", "no-bwrap"])
def test_command_cannot_change_the_helper(world, config):
    """The helper runs before any confinement of the next command: no command may write it."""
    sb = make_sandbox(config, world)
    exe = helper.build()
    if exe is None:
        pytest.skip("no C compiler")
    before = exe.read_bytes()
    r = sb.run(["sh", "-c", f"printf x > {exe} || echo refused"], cwd=world.ws, timeout_s=30)
    assert "refused" in r.stdout or r.exit_code != 0, r.stdout
    assert exe.read_bytes() == before


@pytest.mark.parametrize("config", ["bwrap", "no-bwrap"])
def test_stdin_reaches_the_command(world, config):
    """`stdin` is what the command reads (a hook's event JSON), whole, also past a pipe's
    buffer; by default it reads nothing."""
    sb = make_sandbox(config, world)
    data = b"{}" + b"x" * (1 << 20)
    r = sb.run(["sh", "-c", "wc -c; exit 3"], cwd=world.ws, timeout_s=30, stdin=data)
    assert r.exit_code == 3 and int(r.stdout) == len(data), r.stderr
    r = sb.run(["sh", "-c", "wc -c"], cwd=world.ws, timeout_s=30)
    assert r.exit_code == 0 and int(r.stdout) == 0
