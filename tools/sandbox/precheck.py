"""Would a tool call be refused by the path guard? Answered without running it."""

from __future__ import annotations

from typing import Any

from m3agent.tools.sandbox.policy import SandboxMode, SandboxPolicy

_READS = {"read_file": "path", "list_dir": "path", "glob": "path", "grep": "path"}
_WRITES = {"write_file": "path", "edit_file": "path"}


def would_block(policy: SandboxPolicy, tool_name: str, arguments: dict[str, Any]) -> bool:
    from m3agent.tools.base import ToolContext
    from m3agent.tools.paths import PathDenied, check_read, check_write

    ctx = ToolContext(cwd=policy.workspace, sandbox=policy)
    try:
        if tool_name in _READS:
            check_read(str(arguments.get(_READS[tool_name]) or "."), ctx)
        elif tool_name in _WRITES:
            check_write(str(arguments.get(_WRITES[tool_name]) or ""), ctx)
        elif tool_name == "apply_patch":
            from m3agent.tools.patch_parse import PatchError, parse

            try:
                ops = parse(str(arguments.get("patch") or ""))
            except PatchError:
                return False  # malformed: the tool itself reports it
            for op in ops:
                check_write(op.path, ctx)
                if op.move_to:
                    check_write(op.move_to, ctx)
        elif tool_name == "shell":
            return False  # a command's reach is enforced by the layers, not predicted
    except PathDenied:
        return True
    return policy.mode is SandboxMode.READ_ONLY and tool_name in {*_WRITES, "apply_patch"}
