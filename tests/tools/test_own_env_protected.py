"""m3agent installed into the project's own virtualenv (`<workspace>/.venv`): the agent's
next start on the host would run a `.pth` file or a `bin/python` the sandboxed model wrote
there, as the user, with the agent's keys. The agent's environment is read-only to commands
wherever it lies in a writable root (tools/sandbox/boot.py: inside_roots), as the launcher's
own package is; the control leaves it out of the protected paths and the write lands."""

from __future__ import annotations

import sys

import pytest
from m3agent.tools.sandbox import boot
from sandbox_support import CONFIGS, action_argv, make_sandbox, result_of


@pytest.fixture
def venv_in_workspace(world, monkeypatch):
    site = world.ws / ".venv" / "lib" / "python3" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setattr(sys, "prefix", str(world.ws / ".venv"))  # the agent runs from it
    return site


@pytest.mark.parametrize("config", CONFIGS)
def test_the_agents_own_virtualenv_in_the_workspace_is_read_only(world, venv_in_workspace, config):
    pth = venv_in_workspace / "zz-planted.pth"
    r = make_sandbox(config, world).run(action_argv("write", pth), timeout_s=30)
    got = result_of(r)
    assert r.started and not got["ok"], got
    assert not pth.exists()
    # The rest of the workspace stays the model's to write.
    r = make_sandbox(config, world).run(action_argv("write", world.ws / "src" / "x.py"))
    assert result_of(r)["ok"]


def test_control_without_the_protection_the_pth_is_written(world, venv_in_workspace, monkeypatch):
    monkeypatch.setattr(boot, "own_environment", lambda: ())
    pth = venv_in_workspace / "zz-planted.pth"
    r = make_sandbox("bwrap", world).run(action_argv("write", pth), timeout_s=30)
    assert result_of(r)["ok"] and pth.exists()
