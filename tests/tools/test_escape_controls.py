"""Controls for the battery: with every layer off, the same attempts succeed. This is what
shows the battery's checks can fail, i.e. that the layers (not the test setup) stop them.
Also: the shell refuses to run unprotected unless the policy says dangerously_no_sandbox."""

from __future__ import annotations

import json

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.sandbox.policy import LAYERS, SandboxLayer, SandboxPolicy, parse_layers
from m3agent.tools.sandbox.report import format_report, probe
from m3agent.tools.sandbox.runner import Sandbox
from m3agent.tools.shell import Shell, ShellArgs
from sandbox_support import SECRET, action_argv, unconfined


def _unprotected(world) -> Sandbox:
    return unconfined(world, network=True)


def _run(sb, argv):
    r = sb.run(argv, timeout_s=30)
    return json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])


def test_control_write_outside_succeeds_unprotected(world):
    assert _run(_unprotected(world), action_argv("write", world.outside / "victim.txt"))["ok"]
    assert "escaped" in (world.outside / "victim.txt").read_text()


def test_control_git_config_writable_unprotected(world):
    assert _run(_unprotected(world), action_argv("write", world.ws / ".git" / "config"))["ok"]


def test_control_secret_readable_unprotected(world):
    got = _run(_unprotected(world), action_argv("read", world.home / ".ssh" / "id_rsa"))
    assert got["ok"] and got["data"] == SECRET


def test_control_network_reachable_unprotected(world, servers):
    got = _run(_unprotected(world), action_argv("tcp", "127.0.0.1", servers["tcp"][0]))
    assert got["ok"]
    got = _run(_unprotected(world), action_argv("dns", "127.0.0.1", servers["dns"][0]))
    assert got["ok"] and servers["dns"][1].got


def test_control_signal_reaches_outside_unprotected(world, victim_process):
    assert _run(_unprotected(world), action_argv("signal", victim_process.pid))["ok"]
    assert victim_process.wait(timeout=5) != 0


def test_control_fork_loop_uncapped_unprotected(world):
    got = _run(_unprotected(world), action_argv("fork_bomb", 150))
    assert got["ok"] and got["made"] == 150


def test_shell_refuses_without_any_confining_layer(world):
    policy = SandboxPolicy(workspace=world.ws, disabled_layers=frozenset(LAYERS))
    ctx = ToolContext(cwd=world.ws, sandbox=Sandbox(policy))
    marker = world.ws / "ran"
    res = Shell().run(ShellArgs(command=f"touch {marker}"), ctx)
    assert res.is_error and "--dangerously-no-sandbox" in res.output
    assert res.metadata["blocked_by"] == "no_sandbox"
    assert not marker.exists()


def test_shell_runs_unprotected_when_explicitly_allowed(world):
    policy = SandboxPolicy(
        workspace=world.ws, disabled_layers=frozenset(LAYERS), dangerously_no_sandbox=True
    )
    ctx = ToolContext(cwd=world.ws, sandbox=Sandbox(policy))
    res = Shell().run(ShellArgs(command="echo unprotected"), ctx)
    assert not res.is_error and "unprotected" in res.output


def test_policy_rejects_unknown_mode_and_layer(world):
    with pytest.raises(ValueError, match="unknown sandbox mode"):
        SandboxPolicy(workspace=world.ws, mode="yolo")
    with pytest.raises(ValueError, match="unknown sandbox layer"):
        SandboxPolicy(workspace=world.ws, disabled_layers=frozenset({"apparmor"}))


def test_policy_json_round_trip(world):
    p = SandboxPolicy(
        workspace=world.ws,
        network=True,
        extra_writable=(world.outside,),
        disabled_layers=frozenset({SandboxLayer.BWRAP}),
        home=world.home,
    )
    assert SandboxPolicy.from_json(p.to_json()) == p


def test_layer_names_are_one_enum_shown_as_before(world):
    """Issue 40 item 5: the layers are SandboxLayer members wherever they are produced and
    held, and their values are the names doctor, the status bar and the JSON always showed."""
    names = ["bwrap", "landlock", "seccomp", "rlimits", "cgroup", "tree_kill", "env_scrub"]
    assert list(LAYERS) == list(SandboxLayer) == [*names, "privileges"]
    report = probe(SandboxPolicy(workspace=world.ws))
    assert [s.name for s in report.layers] == list(SandboxLayer)
    assert all(type(s.name) is SandboxLayer for s in report.layers)
    shown = json.loads(json.dumps(report.to_dict()))
    assert [x["name"] for x in shown["layers"]] == [*names, "privileges"]
    text = format_report(report)
    for s in report.layers:  # the doctor's rows: the plain name, padded as before
        assert f"{s.name.value:<10} {s.detail}" in text
    # names as the CLI's --without and the policy's JSON give them become members
    p = SandboxPolicy(workspace=world.ws, disabled_layers=frozenset({"bwrap"}))
    assert all(type(x) is SandboxLayer for x in p.disabled_layers)
    assert json.loads(p.to_json())["disabled_layers"] == ["bwrap"]
    assert SandboxPolicy.from_json(p.to_json()).disabled_layers == {SandboxLayer.BWRAP}
    with pytest.raises(ValueError, match=r"layer\(s\) \['apparmor'\] \(known: bwrap, landlock, "):
        parse_layers(["bwrap", "apparmor"])
