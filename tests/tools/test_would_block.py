"""Sandbox.would_block: what approvals ask before a call the path guard would refuse (derived
from each tool's declared touches: tools/sandbox/precheck.py)."""

from __future__ import annotations

from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.report import SandboxReport
from m3agent.tools.sandbox.runner import Sandbox


def _sandbox(tmp_path, mode="workspace-write"):
    policy = SandboxPolicy(workspace=tmp_path, mode=mode)
    return Sandbox(policy, SandboxReport(policy.mode.value, False, ()))  # no probe needed


def test_would_block_paths(tmp_path):
    sb = _sandbox(tmp_path)
    assert sb.mode.value == "workspace-write"
    assert not sb.would_block("write_file", {"path": "src/a.py", "content": ""})
    assert sb.would_block("write_file", {"path": "../a.py", "content": ""})
    assert sb.would_block(
        "edit_file", {"path": ".git/config", "old_string": "a", "new_string": "b"}
    )
    assert not sb.would_block("read_file", {"path": "/etc/hostname"})
    assert sb.would_block("read_file", {"path": "~/.ssh/id_rsa"})
    patch = "*** Begin Patch\n*** Add File: ../x.py\n+x\n*** End Patch"
    assert sb.would_block("apply_patch", {"patch": patch})
    assert not sb.would_block("apply_patch", {"patch": patch.replace("../", "")})
    assert not sb.would_block("shell", {"command": "rm -rf /"})  # the layers decide at run time


def test_read_only_blocks_every_file_change(tmp_path):
    sb = _sandbox(tmp_path, "read-only")
    assert sb.would_block("write_file", {"path": "a.py", "content": ""})
    assert sb.would_block(
        "apply_patch", {"patch": "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch"}
    )
    assert not sb.would_block("grep", {"pattern": "x"})
