"""Warm by default: `m3agent run` and the TUI use a background `m3agent serve` for local engines.

A local engine (native, vllm) run in the front end's own process pays the model load and the
whole prompt's prefill on every start: a resumed 27,814-token session took 472 s on the tiny CPU
model, against 6.8 s through a server whose prefix cache still held it. So for native and vllm
the front ends reuse the ready server of the same model (its lock file, app/serve/lock.py) or
start one detached (app/serve/detach.py) and attach to it. Two workspaces on the same model
share one server; two runs starting at once start one (the lock picks the winner, the other
run waits for it). The server keeps running after the run; `m3agent serve --stop` ends it, and so does its idle
timeout (server_idle_timeout_s, app/serve/idle.py).
Opting out: `--in-process`, or `warm = false` in config.toml.

While the server loads, its log's weight-loading lines (written by `load_log_writer` in the
server) come back to the front end as Progress events.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO
from urllib.parse import urlsplit

from m3agent.agent.events import Progress, ProgressStage
from m3agent.engine.api import LOCAL_ENGINES, Engine, EngineUnavailable
from m3agent.engine.file_lock import wait_for_flock
from m3agent.engine.m3.chat_template import ChatTemplate
from m3agent.engine.m3.tokenizer import M3Tokenizer
from m3agent.engine.model_source import resolve_model
from m3agent.tools.private_fs import open_private, private_dir

from .serve.detach import log_tail, start_detached
from .serve.guard import read_token
from .serve.lock import all_locks, find_lock, lock_path

if TYPE_CHECKING:
    from m3agent.engine.model_source import ResolvedModel

    from .serve.lock import ServerLock
    from .settings import Settings

STOP_HINT = "stop it with `m3agent serve --stop`"
_LOAD_LINE = re.compile(r"loading weights (\d+)% \(([\d,]+) of ([\d,]+) bytes\)")

Report = Callable[[Progress], None]


def local_chat_files(model: str | None) -> dict[str, Any]:
    """The tokenizer and chat template of `model` when its files are on this machine (a local
    directory, or a hub snapshot already cached): the remote backend then renders prompts
    with the checkpoint's own template and sends token ids. Never downloads; {} otherwise."""
    if not model:
        return {}

    try:
        path = resolve_model(model, local_only=True, check=False).path
        return {
            "tokenizer": M3Tokenizer.from_model_dir(path),
            "template": ChatTemplate.from_model_dir(path),
        }
    except (ValueError, OSError, EngineUnavailable):
        return {}


def user_model_dirs(settings: Settings) -> tuple[Path, ...]:
    """Where a model name (not written as a path) is looked up before the hub: the user's own
    `<data home>/models` (engine/model_source.py), never the working directory."""
    return (settings.home / "models",)


def wants_server(settings: Settings) -> bool:
    """True when this front end should run the model in a background server."""
    return bool(settings.warm and settings.engine in LOCAL_ENGINES and settings.model)


def running_server(settings: Settings) -> ServerLock | None:
    """The lock of a running `m3agent serve` of settings.model (local engines), else None.

    Only looks at local state (lock files, the hub cache): never downloads, never loads."""
    if settings.engine not in LOCAL_ENGINES or not settings.model:
        return None

    try:
        key = resolve_model(
            settings.model, local_only=True, check=False, model_dirs=user_model_dirs(settings)
        ).key
    except (ValueError, EngineUnavailable):
        return None
    return find_lock(settings.home, key)


def attach_to_server(settings: Settings, report: Report | None = None) -> Engine | None:
    """A RemoteEngine on a running `m3agent serve` of the same model, else None."""
    lock = running_server(settings)
    engine = attach(settings, lock)
    if engine is not None and lock is not None and report is not None:
        report(_using(lock))
    return engine


def server_engine(settings: Settings, report: Report | None = None) -> Engine:
    """A RemoteEngine on the server of settings.model, started now when none runs."""
    engine = attach(settings, ensure_server(settings, report))
    if engine is None:  # a ready lock always has an address; a hand-edited one may not
        raise EngineUnavailable("the m3agent serve for this model has no address in its lock")
    return engine


_ANY_HOST = ("0.0.0.0", "::", "[::]")  # a server listening on every address
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def local_serve(home: Path, base_url: str) -> ServerLock | None:
    """The running `m3agent serve` of this data home listening at base_url, else None.
    Another user's server is never found: its locks and token live in their data home."""
    try:
        url = urlsplit(base_url.strip())
        host, port = (
            (url.hostname or "").lower(),
            url.port or (443 if url.scheme == "https" else 80),
        )
    except ValueError:
        return None
    for lock in all_locks(home):
        if lock.port != port:
            continue
        mine = (lock.host or "127.0.0.1").lower()
        if host == mine.strip("[]") or (host in _LOOPBACK and mine in (*_LOOPBACK, *_ANY_HOST)):
            return lock
    return None


def remote_api_key(settings: Settings) -> str | None:
    """The key `--engine remote` sends: the configured one (api_key, M3AGENT_API_KEY,
    OPENAI_API_KEY), else the token (app/serve/guard.py) of this data home's `m3agent serve`
    at base_url: your own server needs no key typed in."""
    if settings.api_key:
        return settings.api_key
    if local_serve(settings.home, settings.base_url) is None:
        return None

    return read_token(settings.home)


def attach(settings: Settings, lock: ServerLock | None) -> Engine | None:
    """A RemoteEngine on the server of this lock when it is ready, else None."""
    if lock is None or lock.state != "ready" or (lock.base_url is None and not lock.socket):
        return None
    from m3agent.engine.backends.remote import RemoteEngine

    # A unix-socket server is reached by HTTP over the socket; the URL's host is then unused.
    # The server wants the owner's token (app/serve/guard.py): read from the data home.
    return RemoteEngine(
        lock.base_url or "http://localhost/v1",
        lock.served_model_name,
        api_key=read_token(settings.home),
        timeout=settings.request_timeout_s,
        retries=settings.retries,
        max_context_tokens=lock.max_context_tokens or 196_608,
        send_raw_text=True,
        unix_socket=None if lock.base_url else lock.socket,
        **local_chat_files(lock.model),
    )


def _using(lock: ServerLock) -> Progress:
    return _server(
        f"using m3agent serve ({lock.backend}, {lock.served_model_name}) on "
        f"{lock.address}, pid {lock.pid}: it keeps running; {STOP_HINT}",
        final=True,
    )


def _server(message: str, *, final: bool = False) -> Progress:
    return Progress(stage=ProgressStage.SERVER, message=message, final=final)


def ensure_server(
    settings: Settings, report: Report | None = None, timeout_s: float = 3600.0
) -> ServerLock:
    """The ServerLock of a ready server of settings.model: the running one, else one started
    now (detached, in its own session). EngineUnavailable with the log's last line when it
    cannot start."""
    if not settings.model:  # wants_server() said yes only with a model
        raise EngineUnavailable("no model to serve: give --model")
    say = report or (lambda p: None)
    # Downloads a hub model here, in the foreground (progress bars), not in the server.
    resolved = resolve_model(settings.model, model_dirs=user_model_dirs(settings))
    lock = find_lock(settings.home, resolved.key)
    if lock is not None and lock.state == "ready":
        say(_using(lock))
        return lock
    deadline = time.monotonic() + timeout_s
    if lock is None:
        # One starter at a time per model (runs in two workspaces may start together): the
        # others wait here, then find the winner's server ready.
        with _start_lock(settings.home, resolved.key, say, deadline):
            lock = find_lock(settings.home, resolved.key)
            if lock is None:
                lock = _start(settings, resolved, say, timeout_s)
    if lock is None or lock.state != "ready":
        lock = _wait_ready(settings.home, resolved.key, say, deadline)
    return lock


@contextlib.contextmanager
def _start_lock(home: Path, key: str, say: Report, deadline: float) -> Iterator[None]:
    """An exclusive flock on <serve dir>/<model>.start, polled so that the model-load lines
    of the server being started elsewhere keep coming while this run waits."""
    path = _log_path(home, key).with_suffix(".start")
    private_dir(path.parent)
    relay = LoadRelay(_log_path(home, key), say)
    said = False

    def waiting() -> None:
        nonlocal said
        if not said:
            say(_server("another m3agent run is starting the server; waiting for it"))
            said = True
        relay.poll()

    with os.fdopen(open_private(path, os.O_WRONLY | os.O_APPEND), "a") as f:
        if not wait_for_flock(f, deadline, waiting):
            raise EngineUnavailable(f"another m3agent run is still starting the server for {key}")
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _log_path(home: Path, key: str) -> Path:
    return lock_path(home, key).with_suffix(".log")


def _start(
    settings: Settings, resolved: ResolvedModel, say: Report, timeout_s: float
) -> ServerLock | None:
    log = _log_path(settings.home, resolved.key)
    say(
        _server(
            f"starting m3agent serve --engine {settings.engine} for {resolved.path.name} "
            f"in the background (log {log})"
        )
    )
    relay = LoadRelay(log, say)
    argv = ["serve", "--engine", settings.engine, "--model", str(resolved.path)]
    if settings.engine == "native":  # flags of this run the config file does not carry
        argv += [
            "--offload-experts",
            settings.offload_experts,
            "--expert-form",
            settings.expert_form,
        ]
    if settings.server_idle_timeout_s > 0:  # started for us: it ends itself when unused
        argv += ["--idle-timeout", str(settings.server_idle_timeout_s)]
    # The data home as its working directory: the server outlives the run's workspace.
    # Its data home and config are ours whatever the environment says: its lock must be where
    # we look, and it must load the model as this run would (device, dtype).
    env = {
        **os.environ,
        "M3AGENT_HOME": str(settings.home),
        "M3AGENT_CONFIG": str(settings.config_path),
    }
    lock, _, tail = start_detached(
        argv, settings.home, resolved.key, timeout_s, cwd=settings.home, on_wait=relay.poll, env=env
    )
    if lock is not None:
        relay.poll()
        say(
            _server(
                f"started m3agent serve ({lock.backend}, {lock.served_model_name}) on "
                f"{lock.address}, pid {lock.pid}: it keeps running for later runs and "
                f"keeps their prefix cache; {STOP_HINT}",
                final=True,
            )
        )
        return lock

    # It exits at once when another run's server took the lock first: wait for that one.
    if find_lock(settings.home, resolved.key) is not None:
        return None
    raise EngineUnavailable(
        f"m3agent serve did not start (log {log}): {_reason(tail)}; "
        "--in-process loads the model in this process instead"
    )


def _reason(tail: str) -> str:
    """The server's own one-line reason in its log's tail: its last `error:` line (a warning
    or a traceback's frames may follow it), else the last line."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    if errors:
        return errors[-1].removeprefix("error:").strip()
    return lines[-1] if lines else "no output"


def _wait_ready(home: Path, key: str, say: Report, deadline: float) -> ServerLock:
    log = _log_path(home, key)
    relay = LoadRelay(log, say)
    said = False
    while time.monotonic() < deadline:
        lock = find_lock(home, key)
        if lock is None:
            raise EngineUnavailable(
                f"the m3agent serve being started for {key} exited (log {log}): "
                f"{_reason(log_tail(log))}; --in-process loads the model here instead"
            )
        if lock.state == "ready":
            say(_using(lock))
            return lock
        if not said:
            say(_server(f"waiting for m3agent serve pid {lock.pid} to load the model"))
            said = True
        relay.poll()
        time.sleep(0.2)
    raise EngineUnavailable(f"m3agent serve for {key} is not ready in time (log {log})")


class LoadRelay:
    """Reads the server log's last weight-loading line and reports it when it changes."""

    def __init__(self, log: Path, say: Report) -> None:
        self._log = log
        self._say = say
        self._seen: tuple[int, int] | None = None

    def poll(self) -> None:
        try:
            with self._log.open("rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 4096))
                tail = f.read().decode("utf-8", "replace")
        except OSError:
            return
        hits = _LOAD_LINE.findall(tail)
        if not hits:
            return
        _, done_s, total_s = hits[-1]
        done, total = int(done_s.replace(",", "")), int(total_s.replace(",", ""))
        if (done, total) != self._seen:
            self._seen = (done, total)
            self._say(load_progress(done, total))


def load_progress(done: int, total: int) -> Progress:
    """The model-load Progress event for `done` of `total` checkpoint bytes."""
    pct = 100 * done // total if total else 100
    return Progress(
        stage=ProgressStage.MODEL_LOAD,
        message=f"loading weights {pct}% ({done / 1e6:,.1f} of {total / 1e6:,.1f} MB)",
        done=done,
        total=total,
        unit="bytes",
        final=done >= total,
    )


def load_log_writer(
    log: TextIO, interval_s: float = 0.5, clock: Callable[[], float] = time.monotonic
) -> Report:
    """The progress callback inside `m3agent serve`: a weight-loading line in its log every
    interval_s (and the last one), which LoadRelay reads back in the run waiting for it."""
    last = [float("-inf")]

    def write(p: Progress) -> None:
        if p.stage != ProgressStage.MODEL_LOAD or p.total is None:
            return
        now = clock()
        if not p.final and now - last[0] < interval_s:
            return
        last[0] = now
        pct = 100 * p.done // p.total if p.total else 100
        log.write(f"m3agent serve: loading weights {pct}% ({p.done:,} of {p.total:,} bytes)\n")
        log.flush()

    return write
