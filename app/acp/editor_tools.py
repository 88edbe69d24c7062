"""The session's tools as an editor sees them: the same list (the prompt's tools never
change), but

- in plan mode a mutating tool is refused before anything asks (read-only planning);
- when the editor offers fs/read_text_file and fs/write_text_file, read_file and write_file
  go through it, so the model reads unsaved buffers and the editor shows its writes. The path
  guard still decides which paths may be touched, and a read is of a file read_file itself
  would open (regular, one link).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any

from m3agent.agent.approvals import ApprovalGate
from m3agent.agent.config import PermissionMode
from m3agent.tools.base import Blocker, ToolContext, ToolResult
from m3agent.tools.fdio import FsRefused, open_regular
from m3agent.tools.gated_toolset import GatedToolset
from m3agent.tools.paths import PathDenied, check_read, check_write, hardlinks_allowed
from m3agent.tools.read_file import ReadFile
from m3agent.tools.write_file import WriteFile

# bridge(method, path, **fields) -> a coroutine run on the connection's loop: the text read
# ("read"), None ("write").
Bridge = Callable[..., Coroutine[Any, Any, str | None]]
_READ, _WRITE = ReadFile.name, WriteFile.name  # the tools the editor's fs can serve


class EditorToolset(GatedToolset):
    def __init__(
        self,
        inner: Any,
        loop: asyncio.AbstractEventLoop,
        bridge: Bridge | None,
        can_read: bool,
        can_write: bool,
        gate: ApprovalGate | None = None,
    ) -> None:
        super().__init__(inner)
        self.loop = loop
        self.bridge = bridge
        self.can_read = can_read and bridge is not None
        self.can_write = can_write and bridge is not None
        # the session's gate holds the permission mode (set_mode); none: never plan mode
        self.gate = gate

    def refused(self, name: str) -> bool:
        if self.gate is None or self.gate.mode is not PermissionMode.PLAN:
            return False
        try:
            return bool(self.inner.get(name).mutates)
        except KeyError:
            return False

    def unavailable(self, name: str) -> str:
        return f"{name} is not available in plan mode"

    def denial(self, name: str) -> str:
        return (
            f"not run: {name} changes files or runs commands, and the session is in plan "
            "mode (read only); propose the change instead"
        )

    def dispatch(self, name: str, arguments: Any, ctx: ToolContext) -> ToolResult:
        if not self.refused(name) and isinstance(arguments, dict):
            if isinstance(arguments.get("path"), str):
                if name == _READ and self.can_read:
                    return self._editor_read(arguments, ctx)
                if name == _WRITE and self.can_write and isinstance(arguments.get("content"), str):
                    return self._editor_write(arguments, ctx)
        return super().dispatch(name, arguments, ctx)

    def _call(self, method: str, **fields: Any) -> str | None:
        assert self.bridge is not None  # can_read/can_write say so
        fut = asyncio.run_coroutine_threadsafe(self.bridge(method, **fields), self.loop)
        return fut.result(timeout=60)

    def _editor_read(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            path = check_read(args["path"], ctx)
            # what read_file itself would open: a regular file, one link (a hard link may be
            # a second name of a secret outside the workspace; the editor reads it by name)
            os.close(open_regular(path, args["path"], links_ok=hardlinks_allowed(path, ctx)))
        except (PathDenied, FsRefused) as e:
            return ToolResult(str(e), is_error=True, metadata={"blocked_by": Blocker.PATH_GUARD})
        offset = int(args.get("offset") or 1)
        limit = int(args.get("limit") or 2000)
        try:
            text = self._call("read", path=str(path), line=offset, limit=limit) or ""
        except Exception as e:  # the editor said no, or went away
            return ToolResult(f"the editor could not read {path}: {e}", is_error=True)
        lines = text.splitlines()
        numbered = "\n".join(f"{offset + i:6}\t{line}" for i, line in enumerate(lines))
        return ToolResult(numbered or "(empty)", metadata={"via": "editor"})

    def _editor_write(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            path = check_write(args["path"], ctx)
        except PathDenied as e:
            return ToolResult(str(e), is_error=True, metadata={"blocked_by": Blocker.PATH_GUARD})
        try:
            self._call("write", path=str(path), content=args["content"])
        except Exception as e:
            return ToolResult(f"the editor could not write {path}: {e}", is_error=True)
        n = args["content"].count("\n")
        return ToolResult(
            f"wrote {path} ({n} lines) through the editor",
            metadata={"via": "editor", "paths_changed": [str(path)]},
        )
