"""A session's language servers: one per configured command, started on first use and kept
for the session; the documents each has open and their versions; the wait for the
diagnostics it publishes after a change.

A server that cannot start (not installed, refused by the sandbox), exits, breaks the
protocol or misses its deadline is never fatal: the check returns a note for the model and
the turn goes on. A server that died is started again on the next check, up to
MAX_STARTS times a session; one that cannot start is not tried again."""

from __future__ import annotations

import contextlib
import shlex
import shutil
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..host_programs import command_path
from .client import LspClient, ServerGone, ServerSlow

# (argv, cwd, run_dir) -> the confined command line and its environment (diagnostics.py);
# PermissionError when the launch policy refuses to start it.
Launch = Callable[[list[str], Path, Path], tuple[list[str], dict[str, str]]]

MAX_STARTS = 3
MAX_FILE_BYTES = 2 * 1024 * 1024  # a larger file is not sent to a server
MAX_MESSAGE_CHARS = 500  # of one diagnostic's message
_SEVERITY = {1: "error", 2: "warning", 3: "info", 4: "hint"}
# The languageId a server expects for an extension; any other goes as the extension itself.
_LANGUAGE = {
    "py": "python",
    "pyi": "python",
    "js": "javascript",
    "jsx": "javascriptreact",
    "ts": "typescript",
    "tsx": "typescriptreact",
    "rs": "rust",
    "sh": "shellscript",
    "bash": "shellscript",
    "md": "markdown",
    "yml": "yaml",
    "h": "c",
    "hpp": "cpp",
    "cc": "cpp",
    "cxx": "cpp",
}


@dataclass(frozen=True, slots=True)
class LspReport:
    text: str  # the findings, one line each: path:line:col: severity: message
    note: str = ""  # what went wrong with the server, if anything


@dataclass
class _Server:
    client: LspClient | None = None
    run_dir: Path | None = None
    stderr: Any = None
    versions: dict[str, int] = field(default_factory=dict)
    starts: int = 0
    refused: str = ""  # why it cannot start in this session at all (not installed)
    lock: threading.Lock = field(default_factory=threading.Lock)


class LspPool:
    def __init__(self, launch: Launch, root: Path, timeout_s: float) -> None:
        self._launch = launch
        self._root = root.resolve()
        self._timeout_s = timeout_s
        self._servers: dict[str, _Server] = {}
        self._lock = threading.Lock()
        # Servers are stopped when the pool goes away, and at the latest when Python exits.
        self._finalizer = weakref.finalize(self, _close_all, self._servers)

    def close(self) -> None:
        self._finalizer()

    def check(self, command: str, files: Sequence[str]) -> LspReport:
        """The diagnostics `command`'s server publishes for `files` (workspace-relative or
        absolute), after sending it their current text."""
        with self._lock:
            server = self._servers.setdefault(command, _Server())
        with server.lock:
            if server.refused:
                return LspReport("", server.refused)
            try:
                client = self._started(command, server)
                return self._check(client, server, files)
            except (FileNotFoundError, PermissionError) as e:  # not installed, not allowed
                _stop(server)
                server.refused = f"not started: {e}"
                return LspReport("", server.refused)
            except (ServerGone, ServerSlow, OSError) as e:
                why = _reason(e, server)
                _stop(server)
                if server.starts < MAX_STARTS:
                    return LspReport("", f"failed: {why}; it is started again on the next edit")
                server.refused = f"failed: {why}; not started again this session"
                return LspReport("", server.refused)

    def _started(self, command: str, server: _Server) -> LspClient:
        if server.client is not None and server.client.gone is None:
            return server.client
        if server.client is not None:  # it died since the last check
            _stop(server)
        argv = shlex.split(command)
        # found where the sandboxed server will look (a project's node_modules/.bin too)
        if not argv or shutil.which(argv[0], path=command_path()) is None:
            raise FileNotFoundError(
                f"{argv[0] if argv else command!r} is not installed (not found on PATH)"
            )
        server.starts += 1
        server.run_dir = Path(tempfile.mkdtemp(prefix="m3agent-lsp-"))
        full, env = self._launch(argv, self._root, server.run_dir)
        server.stderr = open(server.run_dir / "stderr", "w+b")  # noqa: SIM115 (kept open)
        proc = subprocess.Popen(
            full,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=server.stderr,
            env=env,
            cwd=self._root,
            start_new_session=True,
        )
        server.client = client = LspClient(proc)
        server.versions = {}
        uri = self._root.as_uri()
        client.request(
            "initialize",
            {
                "processId": None,
                "rootUri": uri,
                "rootPath": str(self._root),
                "workspaceFolders": [{"uri": uri, "name": self._root.name}],
                "capabilities": {
                    "textDocument": {
                        "synchronization": {"didSave": False, "dynamicRegistration": False},
                        "publishDiagnostics": {"versionSupport": True},
                    },
                    "workspace": {"configuration": True, "workspaceFolders": True},
                },
                "clientInfo": {"name": "m3agent"},
            },
            self._timeout_s,
        )
        client.notify("initialized", {}, self._timeout_s)
        return client

    def _check(self, client: LspClient, server: _Server, files: Sequence[str]) -> LspReport:
        sent: dict[str, int] = {}
        names: dict[str, str] = {}
        skipped = []
        since = client.mark()
        for rel in files:
            path = Path(rel) if Path(rel).is_absolute() else self._root / rel
            try:
                if path.stat().st_size > MAX_FILE_BYTES:
                    skipped.append(rel)
                    continue
                text = path.read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            uri = path.resolve().as_uri()
            names[uri] = rel
            if uri in server.versions:
                version = server.versions[uri] = server.versions[uri] + 1
                client.notify(
                    "textDocument/didChange",
                    {
                        "textDocument": {"uri": uri, "version": version},
                        "contentChanges": [{"text": text}],
                    },
                    self._timeout_s,
                )
            else:
                version = server.versions[uri] = 1
                suffix = path.suffix.lower().lstrip(".")
                client.notify(
                    "textDocument/didOpen",
                    {
                        "textDocument": {
                            "uri": uri,
                            "languageId": _LANGUAGE.get(suffix, suffix),
                            "version": version,
                            "text": text,
                        }
                    },
                    self._timeout_s,
                )
            sent[uri] = version
        found, missing = client.wait_published(sent, since, self._timeout_s)
        lines = [line for uri in sent if uri in found for line in _lines(names[uri], found[uri])]
        notes = []
        if missing:
            what = ", ".join(names[u] for u in missing)
            notes.append(f"published nothing for {what} within {self._timeout_s:g}s")
        if skipped:
            notes.append(
                f"not sent (over {MAX_FILE_BYTES // 1024 // 1024} MB): {', '.join(skipped)}"
            )
        return LspReport("\n".join(lines), "; ".join(notes))


def _lines(name: str, diagnostics: list[Any]) -> list[str]:
    rows = []
    for d in diagnostics:
        if not isinstance(d, dict):
            continue
        start = (d.get("range") or {}).get("start") or {}
        line, col = start.get("line"), start.get("character")
        line = line + 1 if isinstance(line, int) else 0
        col = col + 1 if isinstance(col, int) else 0
        severity = _SEVERITY.get(d.get("severity"), "error")  # type: ignore[arg-type]
        message = " ".join(str(d.get("message", "")).split())[:MAX_MESSAGE_CHARS]
        label = " ".join(str(x) for x in (d.get("source"), d.get("code")) if x not in (None, ""))
        rows.append(
            (
                line,
                col,
                f"{name}:{line}:{col}: {severity}: {message}" + (f" [{label}]" if label else ""),
            )
        )
    return [text for *_, text in sorted(rows, key=lambda r: (r[0], r[1]))]


def _reason(e: Exception, server: _Server) -> str:
    why = str(e) or type(e).__name__
    tail = _stderr_tail(server)
    return f"{why} ({tail})" if tail else why


def _stderr_tail(server: _Server, lines: int = 2) -> str:
    if server.stderr is None:
        return ""
    try:
        server.stderr.flush()
        server.stderr.seek(0, 2)
        size = server.stderr.tell()
        server.stderr.seek(max(0, size - 2048))
        text = server.stderr.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
    rows = [r.strip() for r in text.splitlines() if r.strip()]
    return " | ".join(rows[-lines:])[:300]


def _stop(server: _Server) -> None:
    client, server.client = server.client, None
    if client is not None:
        with contextlib.suppress(Exception):
            client.close()
    if server.stderr is not None:
        with contextlib.suppress(OSError):
            server.stderr.close()
        server.stderr = None
    if server.run_dir is not None:
        shutil.rmtree(server.run_dir, ignore_errors=True)
        server.run_dir = None


def _close_all(servers: dict[str, _Server]) -> None:
    for server in list(servers.values()):
        _stop(server)
