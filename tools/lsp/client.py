"""One language server process, spoken to over its stdin and stdout.

A reader thread takes every message off stdout: answers to our requests wake their caller,
`textDocument/publishDiagnostics` is kept per document (the latest wins), and the few
requests a server makes of its client (configuration, progress tokens, capability
registration) get an empty answer, so that no server waits on us. Writes never block past
their deadline (a server that stops reading its stdin is a slow server, not a hung agent)."""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from .framing import ProtocolError, encode, read_message


class ServerGone(Exception):
    """The server exited, closed its stdout or broke the protocol."""


class ServerSlow(Exception):
    """No answer within the deadline."""


@dataclass(frozen=True, slots=True)
class Published:
    seq: int  # this client's count of publications when it arrived
    version: int | None
    diagnostics: list[Any]


# Requests a server may make of its client, and the empty answers that satisfy them.
_EMPTY_ANSWERS = {
    "window/workDoneProgress/create": None,
    "client/registerCapability": None,
    "client/unregisterCapability": None,
    "window/showMessageRequest": None,
    "workspace/workspaceFolders": None,
}


class LspClient:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self._stdin = proc.stdin.fileno()
        os.set_blocking(self._stdin, False)
        self._ids = itertools.count(1)
        self._write_lock = threading.Lock()
        self._cond = threading.Condition()
        self._answers: dict[int, dict[str, Any]] = {}
        self._published: dict[str, Published] = {}
        self._seq = 0
        self.gone: str | None = None  # why the server stopped answering, once it has
        self._reader = threading.Thread(target=self._read, name="lsp-reader", daemon=True)
        self._reader.start()

    # -- the wire -----------------------------------------------------------------------
    def request(self, method: str, params: Any, timeout_s: float) -> Any:
        rid = next(self._ids)
        deadline = time.monotonic() + timeout_s
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params}, deadline)
        with self._cond:
            while rid not in self._answers:
                self._check_alive()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ServerSlow(f"no answer to {method} within {timeout_s:g}s")
                self._cond.wait(left)
            answer = self._answers.pop(rid)
        if "error" in answer:
            err = answer["error"] if isinstance(answer["error"], dict) else {}
            raise ServerGone(f"{method} failed: {str(err.get('message', err))[:200]}")
        return answer.get("result")

    def notify(self, method: str, params: Any, timeout_s: float) -> None:
        self._send(
            {"jsonrpc": "2.0", "method": method, "params": params}, time.monotonic() + timeout_s
        )

    def mark(self) -> int:
        """The count of publications so far: wait_published waits for later ones."""
        with self._cond:
            return self._seq

    def wait_published(
        self, versions: dict[str, int], since: int, timeout_s: float
    ) -> tuple[dict[str, list[Any]], list[str]]:
        """For each document uri (with the version we sent), its diagnostics published after
        `since` for that version or later; and the uris nothing came for in time."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                fresh = {u for u, v in versions.items() if self._fresh(u, v, since)}
                if len(fresh) == len(versions) or self.gone is not None:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if not fresh:
                self._check_alive()
            found = {u: self._published[u].diagnostics for u in fresh}
        return found, [u for u in versions if u not in found]

    def _fresh(self, uri: str, version: int, since: int) -> bool:
        p = self._published.get(uri)
        return p is not None and p.seq > since and (p.version is None or p.version >= version)

    def _check_alive(self) -> None:
        if self.gone is not None:
            raise ServerGone(self.gone)

    def _send(self, message: dict[str, Any], deadline: float) -> None:
        data = memoryview(encode(message))
        with self._write_lock:
            while data:
                self._check_alive()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ServerSlow("the server stopped reading its input")
                _, ready, _ = select.select([], [self._stdin], [], min(left, 0.2))
                if not ready:
                    continue
                try:
                    n = os.write(self._stdin, data)
                except BlockingIOError:
                    continue
                except OSError as e:  # EPIPE: it exited
                    self._stopped(f"its input closed ({e.strerror})")
                    raise ServerGone(self.gone or "exited") from None
                data = data[n:]

    def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        why = "it closed its output"
        try:
            while True:
                msg = read_message(stdout)
                if msg is None:
                    break
                self._dispatch(msg)
        except ProtocolError as e:
            why = f"it broke the protocol: {e}"
        except (OSError, ValueError) as e:
            why = f"reading it failed: {e}"
        self._stopped(why)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        method = msg.get("method")
        if method is None:  # an answer to one of our requests
            if isinstance(msg.get("id"), int):
                with self._cond:
                    self._answers[msg["id"]] = msg
                    self._cond.notify_all()
            return
        if "id" in msg:  # the server asks us something
            self._answer(msg["id"], method, msg.get("params"))
            return
        if method == "textDocument/publishDiagnostics":
            params = msg.get("params")
            if not isinstance(params, dict) or not isinstance(params.get("uri"), str):
                return
            found = params.get("diagnostics")
            version = params.get("version")
            with self._cond:
                self._seq += 1
                self._published[params["uri"]] = Published(
                    self._seq,
                    version if isinstance(version, int) else None,
                    found if isinstance(found, list) else [],
                )
                self._cond.notify_all()

    def _answer(self, rid: Any, method: str, params: Any) -> None:
        if method == "workspace/configuration":
            items = params.get("items") if isinstance(params, dict) else None
            reply: dict[str, Any] = {
                "result": [None] * len(items if isinstance(items, list) else [])
            }
        elif method in _EMPTY_ANSWERS:
            reply = {"result": _EMPTY_ANSWERS[method]}
        else:
            reply = {"error": {"code": -32601, "message": f"{method} is not supported"}}
        with contextlib.suppress(ServerGone, ServerSlow):
            self._send({"jsonrpc": "2.0", "id": rid, **reply}, time.monotonic() + 5)

    def _stopped(self, why: str) -> None:
        with self._cond:
            if self.gone is None:
                code = self.proc.poll()
                if code is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        code = self.proc.wait(0.5)
                self.gone = why if code is None else f"it exited with code {code}"
            self._cond.notify_all()

    # -- the end ------------------------------------------------------------------------
    def close(self, timeout_s: float = 2.0) -> None:
        """shutdown, exit, then a kill for a server that ignores both."""
        if self.gone is None:
            with contextlib.suppress(ServerGone, ServerSlow):
                self.request("shutdown", None, timeout_s)
                self.notify("exit", None, timeout_s)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        self._reader.join(timeout_s)
