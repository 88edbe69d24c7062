"""The approvals' precheck: would the path guard refuse a call of a standard tool? Derived
from each tool's declared touches (Toolset.touches, tools/sandbox/precheck.py)."""

from __future__ import annotations

from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.precheck import blocks
from m3agent.tools.toolset import default_toolset
from sandbox_support import unprobed


def _would_block(tmp_path, mode="workspace-write"):
    sb = unprobed(SandboxPolicy(workspace=tmp_path, mode=mode))
    tools = default_toolset(use_ripgrep=False)

    def would_block(tool_name: str, arguments: dict) -> bool:
        touches = tools.touches(tool_name, arguments)
        return touches is not None and blocks(sb, touches)

    return would_block


def test_would_block_paths(tmp_path):
    would_block = _would_block(tmp_path)
    assert not would_block("write_file", {"path": "src/a.py", "content": ""})
    assert would_block("write_file", {"path": "../a.py", "content": ""})
    assert would_block("edit_file", {"path": ".git/config", "old_string": "a", "new_string": "b"})
    assert not would_block("read_file", {"path": "/etc/hostname"})
    assert would_block("read_file", {"path": "~/.ssh/id_rsa"})
    patch = "*** Begin Patch\n*** Add File: ../x.py\n+x\n*** End Patch"
    assert would_block("apply_patch", {"patch": patch})
    assert not would_block("apply_patch", {"patch": patch.replace("../", "")})
    assert not would_block("shell", {"command": "rm -rf /"})  # the layers decide at run time


def test_read_only_blocks_every_file_change(tmp_path):
    would_block = _would_block(tmp_path, "read-only")
    assert would_block("write_file", {"path": "a.py", "content": ""})
    assert would_block(
        "apply_patch", {"patch": "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch"}
    )
    assert not would_block("grep", {"pattern": "x"})
