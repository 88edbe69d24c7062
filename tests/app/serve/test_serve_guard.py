"""`m3agent serve` hardening (issue 21 item 3, issue 27 item 1) against a real server process:
the tiny native M3 on the CPU, real HTTP on 127.0.0.1, a fresh data home under umask 000.

Each protection has a control showing the same request works (or the same file is readable)
when the thing protected against is absent: the token given, the Host/Origin our own, the body
JSON, the path inside the allow-listed directory, the file's modes permissive."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ...support.cli import run_cli, start_cli, wait_ready

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="
)
NOBODY = 65534


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(home, port, pid, token, allowed dir, root) of a server started on a fresh home."""
    # A world-traversable root (not pytest's 0700 one), so that only serve's own modes stand
    # between a second local user and the files.
    root = Path(tempfile.mkdtemp(prefix="m3serve-", dir="/tmp"))
    os.chmod(root, 0o755)
    model = root / "model" / "tiny"
    r = run_cli(root, "model", "init-tiny", str(model), "--layers", "2", "--hidden", "128")
    assert r.returncode == 0, r.stderr
    home = root / "home"  # does not exist yet: serve creates it
    allowed = root / "shared-media"
    allowed.mkdir()
    (allowed / "ok.png").write_bytes(PNG)
    proc = start_cli(
        home,
        *("serve", "--engine", "native", "--model", str(model), "--allow-media-dir", str(allowed)),
        stdout=subprocess.DEVNULL,
        preexec_fn=lambda: os.umask(0),  # the most permissive umask a user can have
    )
    try:
        lock = wait_ready(home, proc, timeout=180)
        token = (home / "serve" / "token").read_text().strip()
        yield {
            "home": home,
            "port": lock["port"],
            "pid": proc.pid,
            "token": token,
            "allowed": allowed,
            "root": root,
            "ctx": lock["max_context_tokens"],
        }
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(root, ignore_errors=True)


def request(
    port: int,
    path: str,
    body=None,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    content_type: str = "application/json",
) -> tuple[int, dict]:
    data = (
        None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    )
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data)
    if data is not None:
        req.add_header("Content-Type", content_type)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def chat(content="hi", **kw):
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 2, **kw}


def test_every_file_serve_writes_is_private_on_a_fresh_home_with_umask_000(served):
    home = served["home"]
    # Control: this umask really is permissive (a file made the ordinary way is 0666).
    probe = served["root"] / "probe"
    subprocess.run(["sh", "-c", f"umask 000; : > {probe}"], check=True)
    assert stat.S_IMODE(probe.stat().st_mode) == 0o666
    # A media file too (written from a data URL before the text-only engine refuses it).
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    request(
        served["port"],
        "/v1/chat/completions",
        chat([{"type": "image_url", "image_url": {"url": url}}]),
        token=served["token"],
    )
    seen = []
    for p in [home, *home.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        want = 0o700 if p.is_dir() else 0o600
        seen.append(p.relative_to(home).as_posix())
        assert mode == want, f"{p}: {oct(mode)}"
    assert {"serve", "serve/token", "serve/media"} <= set(seen), seen
    assert any(s.endswith(".json") for s in seen) and any(s.endswith(".lock") for s in seen)


def test_a_token_is_needed_for_everything_but_health(served):
    port, token = served["port"], served["token"]
    assert len(token) == 64
    assert request(port, "/health")[0] == 200  # open: the agent probes it
    for path, body in (
        ("/v1/models", None),
        ("/v1/models/tiny", None),
        ("/v1/chat/completions", chat()),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 1}),
    ):
        for wrong in (None, "x" * 64, token[:-1] + ("0" if token[-1] != "0" else "1")):
            status, err = request(port, path, body, token=wrong)
            assert status == 401 and "token" in err["error"]["message"], (path, status)
        # Control: the same request with the owner's token is served.
        status, _ = request(port, path, body, token=token)
        assert status in (200, 404), (path, status)  # 404: /v1/models/tiny is another name
    status, out = request(port, "/v1/chat/completions", chat(), token=token)
    assert status == 200 and "cached_tokens" in out["usage"]["prompt_tokens_details"]


_AS_NOBODY = r"""
import json, sys, urllib.request, urllib.error
port, token_file, token = sys.argv[1], sys.argv[2], sys.argv[3]
out = {}
try:
    open(token_file).read()
    out["read_token"] = "yes"
except PermissionError:
    out["read_token"] = "denied"
def ask(tok):
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode(),
        headers={"Content-Type": "application/json", **({"Authorization": "Bearer " + tok} if tok else {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read()).get("usage")
    except urllib.error.HTTPError as e:
        return e.code, None
out["without"] = ask("")
out["with"] = ask(token)
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_another_local_user_can_neither_read_the_token_nor_query_the_server(served):
    home, port, token = served["home"], served["port"], served["token"]
    # Control for the file: the same token in a file with permissive modes is readable by them.
    leaked = served["root"] / "leaked-token"
    leaked.write_text(token)
    os.chmod(leaked, 0o644)
    args = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    args += ["/usr/bin/python3", "-c", _AS_NOBODY, str(port)]

    def as_nobody(token_file: Path, tok: str) -> dict:
        r = subprocess.run(
            args + [str(token_file), tok], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    theirs = as_nobody(home / "serve" / "token", "")
    assert theirs["read_token"] == "denied"
    assert theirs["without"] == [401, None]  # no answer, no cached-token count
    control = as_nobody(leaked, token)
    assert control["read_token"] == "yes"
    status, usage = control["with"]  # with the token, the same uid is served (and sees counts)
    assert status == 200 and "prompt_tokens_details" in usage


def test_foreign_host_and_origin_are_refused(served):
    port, token = served["port"], served["token"]
    for headers in (
        {"Host": f"attacker.example:{port}"},
        {"Host": "rebind.attacker.example"},
        {"Origin": "http://attacker.example"},
        {"Origin": "null"},
        {"Origin": f"http://localhost.attacker.example:{port}"},
    ):
        status, err = request(port, "/v1/chat/completions", chat(), token=token, headers=headers)
        assert status == 403, (headers, status)
        assert "\n" not in err["error"]["message"]
        assert request(port, "/health", headers=headers)[0] == 403  # not even the health line
    # Controls: our own names are served.
    for headers in (
        {},
        {"Host": f"localhost:{port}"},
        {"Host": f"127.0.0.1:{port}"},
        {"Origin": f"http://127.0.0.1:{port}"},
    ):
        assert request(port, "/v1/chat/completions", chat(), token=token, headers=headers)[0] == 200


def test_a_text_plain_post_is_refused(served):
    """A web page's form/fetch 'simple request' needs no preflight: text/plain is its way in."""
    port, token = served["port"], served["token"]
    body = json.dumps(chat()).encode()
    for kind in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x"):
        status, err = request(port, "/v1/chat/completions", body, token=token, content_type=kind)
        assert status == 415 and "application/json" in err["error"]["message"], kind
    control = request(port, "/v1/chat/completions", body, token=token)
    assert control[0] == 200


def test_file_urls_outside_the_allowed_directory_are_never_opened(served):
    port, token, home = served["port"], served["token"], served["home"]
    secret = served["root"] / "private.png"  # the owner's private image, outside the allow-list
    secret.write_bytes(PNG)
    os.chmod(secret, 0o600)

    def image(path: str) -> tuple[int, str]:
        part = {"type": "image_url", "image_url": {"url": f"file://{path}"}}
        status, err = request(port, "/v1/chat/completions", chat([part]), token=token)
        return status, err["error"]["message"]

    existing = image(str(secret))
    missing = image(str(served["root"] / "no-such.png"))
    not_image = image(str(home / "serve" / "token"))
    via_dots = image(f"{served['allowed']}/../private.png")
    assert existing[0] == 400 and "file:// URLs are not opened" in existing[1]
    # The same answer whether the path exists, is no image, or escapes by '..': no oracle.
    assert existing == missing == not_image == via_dots
    # Control: a file inside the allow-listed directory is taken (the text-only engine then
    # refuses the image itself: a different, later message).
    allowed = image(str(served["allowed"] / "ok.png"))
    assert allowed[0] == 400 and "text-only" in allowed[1], allowed


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_a_50mb_chat_body_is_refused_at_once_while_health_answers(served):
    port, token, pid = served["port"], served["token"], served["pid"]
    filler = "All work and no play makes Jack a dull boy. " * (50 * 1024 * 1024 // 44)
    body = json.dumps(chat(filler)).encode()
    assert len(body) >= 50 * 1024 * 1024
    base = _rss_kb(pid)
    peak = [base]
    health: list[int] = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], _rss_kb(pid))
            t = time.monotonic()
            status, _ = request(port, "/health")
            health.append(status if time.monotonic() - t < 2.0 else -1)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(
            (
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
        )
        sender = threading.Thread(target=_send_quietly, args=(s, body))
        sender.start()
        first = s.recv(65536)
        answered = time.monotonic() - started
        sender.join(60)
    time.sleep(0.5)
    done.set()
    watcher.join(30)
    assert first.startswith(b"HTTP/1.1 413"), first[:200]
    assert b"limit" in first
    assert answered < 3.0, answered
    assert health and all(h == 200 for h in health), health
    assert (peak[0] - base) < 64 * 1024, f"RSS grew by {(peak[0] - base) // 1024} MB"
    # The server is still whole: a normal request right after is answered.
    assert request(port, "/v1/chat/completions", chat(), token=token)[0] == 200
    # Control: a body within the limit but holding more text than the context can take is
    # refused too, after parsing, before any tokenization.
    too_much = "word " * (served["ctx"] * 32 // 5 + 1000)
    status, err = request(port, "/v1/chat/completions", chat(too_much), token=token)
    assert status == 413 and "cannot fit" in err["error"]["message"], (status, err)


def _send_quietly(s: socket.socket, body: bytes) -> None:
    try:
        s.sendall(body)
    except OSError:
        pass  # the server may close once it has answered and drained what it allows
