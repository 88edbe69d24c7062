"""web_fetch against real HTTP servers on 127.0.0.1: pages become text, the allow-list is deny
by default and checked again on every redirect, private addresses are refused unless the
config allows them, and what comes back is bounded."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.toolset import Toolset
from m3agent.tools.web_fetch import FetchPolicy, WebFetch

PAGE = (
    "<!doctype html><html><head><title>Sandbox  docs</title><style>p{color:red}</style>"
    "<script>steal()</script></head><body><nav><a href='#top'>top</a></nav>"
    "<h1>Layers</h1><p>The <b>sandbox</b> has <a href='/layers/bwrap'>bubblewrap</a>.</p>"
    "<ul><li>landlock</li><li>seccomp</li></ul>"
    "<pre>def run():\n    return 0</pre><p>Call <code>run()</code>.</p></body></html>"
)


class _Handler(http.server.BaseHTTPRequestHandler):
    routes: dict[str, tuple[int, dict[str, str], bytes]] = {}
    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.seen.append(self.path)
        if self.path == "/drip":  # headers at once, then a byte every 50 ms
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            try:
                for _ in range(200):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.05)
            except OSError:  # the client gave up
                pass
            return
        status, headers, body = self.routes.get(self.path, (404, {}, b"not here"))
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    handler = type("H", (_Handler,), {"routes": {}, "seen": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()
    yield handler, f"http://127.0.0.1:{srv.server_port}"
    srv.shutdown()
    srv.server_close()


LOCAL = FetchPolicy(allowed_domains=["127.0.0.1"], allow_private=["127.0.0.1"])


def _fetch(policy: FetchPolicy, url: str, **args: object):
    tools = Toolset([WebFetch(policy)])
    return tools.dispatch("web_fetch", {"url": url, **args}, ToolContext(cwd=Path("/")))


def html(body: str, charset: str = "utf-8") -> tuple[int, dict[str, str], bytes]:
    return 200, {"Content-Type": f"text/html; charset={charset}"}, body.encode(charset)


def test_a_page_becomes_markdown_like_text(server):
    h, base = server
    h.routes["/docs"] = html(PAGE)
    r = _fetch(LOCAL, base + "/docs")
    assert not r.is_error, r.output
    assert r.output.startswith(f"URL: {base}/docs\nHTTP 200, text/html\nTitle: Sandbox docs\n")
    text = r.output.split("\n\n", 1)[1]
    assert "# Layers" in text and f"[bubblewrap]({base}/layers/bwrap)" in text
    assert "- landlock\n- seccomp" in text
    assert "```\ndef run():\n    return 0\n```" in text and "Call `run()`." in text
    assert "steal" not in text and "color:red" not in text
    assert r.metadata["status"] == 200 and r.metadata["content_type"] == "text/html"


def test_deny_by_default_and_nothing_is_requested(server):
    h, base = server
    h.routes["/docs"] = html(PAGE)
    for policy in (FetchPolicy(), FetchPolicy(allowed_domains=["docs.python.org"])):
        r = _fetch(policy, base + "/docs")
        assert r.is_error and "127.0.0.1 is not in web_fetch's allowed domains" in r.output
    assert h.seen == []


def test_private_addresses_need_allow_private(server):
    h, base = server
    h.routes["/docs"] = html(PAGE)
    r = _fetch(FetchPolicy(allowed_domains=["127.0.0.1"]), base + "/docs")
    assert r.is_error and "127.0.0.1 resolves to a non-public address" in r.output
    assert h.seen == []
    assert not _fetch(FetchPolicy(allowed_domains=["127.0.0.1"], allow_private=["127.0.0.0/8"]),
                      base + "/docs").is_error  # fmt: skip


def test_a_name_pointed_at_a_private_address_is_refused():
    policy = FetchPolicy(allowed_domains=["docs.example.com"])
    rebind = {"docs.example.com": ["93.184.216.34", "169.254.169.254"]}
    with pytest.raises(ValueError, match=r"non-public address \(169\.254\.169\.254\)"):
        policy.address("docs.example.com", 443, lambda host, port: rebind[host])
    ok = policy.address("docs.example.com", 443, lambda host, port: ["93.184.216.34"])
    assert ok == "93.184.216.34"


def test_every_redirect_is_checked_again(server):
    h, base = server
    port = base.rsplit(":", 1)[1]
    h.routes["/docs"] = html(PAGE)
    h.routes["/moved"] = (301, {"Location": "/docs"}, b"")
    h.routes["/away"] = (302, {"Location": f"http://localhost:{port}/docs"}, b"")
    h.routes["/loop"] = (302, {"Location": "/loop"}, b"")
    r = _fetch(LOCAL, base + "/moved")
    assert not r.is_error and r.metadata["redirects"] == [base + "/moved"]
    assert f"redirected from {base}/moved" in r.output
    r = _fetch(LOCAL, base + "/away")  # same server, a name the list does not hold
    assert r.is_error and r.output.startswith(f"{base}/away redirected to http://localhost:")
    assert "localhost is not in web_fetch's allowed domains" in r.output
    assert "/docs" not in h.seen[h.seen.index("/away") :]
    r = _fetch(LOCAL, base + "/loop")
    assert r.is_error and "more than 5 redirects" in r.output


def test_a_denied_domain_wins(server):
    h, base = server
    h.routes["/docs"] = html(PAGE)
    r = _fetch(LOCAL.with_domains([], ["127.0.0.1"]), base + "/docs")
    assert r.is_error and "denied by a WebFetch(domain:...) rule" in r.output
    assert h.seen == []


def test_bounds_bytes_read_and_characters_shown(server):
    h, base = server
    h.routes["/big"] = 200, {"Content-Type": "text/plain"}, b"a" * 300_000 + b"END"
    r = _fetch(FetchPolicy(["127.0.0.1"], allow_private=["127.0.0.1"], max_bytes=100_000,
                           max_chars=30_000), base + "/big")  # fmt: skip
    assert not r.is_error and r.metadata["bytes"] == 100_000 and "END" not in r.output
    assert "[the response was longer than 100000 bytes: the rest not read]" in r.output
    assert "[page text cut at character 30000 of 100000: call again with offset=30000" in r.output
    assert len(r.output) < 31_000
    h.routes["/words"] = (
        200,
        {"Content-Type": "text/plain"},
        b"".join(b"%05d\n" % i for i in range(20_000)),
    )
    policy = FetchPolicy(["127.0.0.1"], allow_private=["127.0.0.1"], max_chars=60)
    first = _fetch(policy, base + "/words")
    assert "00009\n" in first.output and "00010" not in first.output
    second = _fetch(policy, base + "/words", offset=60)
    assert "00010\n" in second.output and "[from character 60 of" not in second.output
    assert "call again with offset=120" in second.output


def test_what_is_not_text_is_not_shown(server):
    h, base = server
    h.routes["/logo.png"] = 200, {"Content-Type": "image/png"}, b"\x89PNG\r\n"
    h.routes["/zipped"] = 200, {"Content-Type": "text/html", "Content-Encoding": "gzip"}, b"\x1f"
    r = _fetch(LOCAL, base + "/logo.png")
    assert r.is_error and "is image/png (HTTP 200), not text: not shown" in r.output
    r = _fetch(LOCAL, base + "/zipped")
    assert r.is_error and "gzip encoding, which is not read" in r.output
    for url in ("file:///etc/passwd", "ftp://127.0.0.1/x", f"http://user:pw@{base[7:]}/x"):
        r = _fetch(LOCAL, url)
        assert r.is_error and ("only http and https" in r.output or "user name" in r.output)


def test_charset_and_http_errors(server):
    h, base = server
    h.routes["/latin"] = html("<p>café</p>", charset="latin-1")
    h.routes["/meta"] = (
        200,
        {"Content-Type": "text/html"},
        "<meta charset='latin-1'><p>naïve</p>".encode("latin-1"),
    )
    assert "café" in _fetch(LOCAL, base + "/latin").output
    assert "naïve" in _fetch(LOCAL, base + "/meta").output
    r = _fetch(LOCAL, base + "/missing")
    assert r.is_error and r.metadata["status"] == 404 and "not here" in r.output


def test_the_call_names_its_domain_for_permission_rules():
    tool = WebFetch(LOCAL)
    assert tool.touches(tool.Args(url="https://Docs.Python.org/3/")).reads == (
        "domain:docs.python.org",
    )
    assert "Only these domains can be fetched: 127.0.0.1." in tool.description


def test_a_slow_server_cannot_hold_the_call(server):
    _, base = server
    policy = FetchPolicy(["127.0.0.1"], allow_private=["127.0.0.1"], timeout_s=0.5)
    started = time.monotonic()
    r = _fetch(policy, base + "/drip")
    assert r.is_error and "the response took longer than the timeout" in r.output
    assert time.monotonic() - started < 8  # the drip alone would take 10 s


def test_https_certificates_are_verified(tmp_path):
    """The TLS path (pinned address, the name as SNI): a certificate no CA vouches for is
    refused, never read through."""
    import shutil
    import ssl
    import subprocess

    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    handler = type("H", (_Handler,), {"routes": {"/": html(PAGE)}, "seen": []})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    srv.socket = tls.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True).start()
    try:
        r = _fetch(LOCAL, f"https://127.0.0.1:{srv.server_port}/")
    finally:
        srv.shutdown()
        srv.server_close()
    assert r.is_error and "CERTIFICATE_VERIFY_FAILED" in r.output, r.output
    assert handler.seen == []


def test_round5_address_forms_rebinding_proxies_and_encodings_are_held(server, monkeypatch):
    """Issue 36, round 5 (held, kept as regressions): a name looked up once per hop and the
    connection pinned to that answer (a second, different answer is never asked for); an
    IPv4-mapped loopback answer; redirects to address forms of loopback; decimal and octal
    hosts; a proxy from the environment; a compressed body."""
    from m3agent.tools.web_fetch.client import FetchRefused, fetch

    h, base = server
    port = int(base.rsplit(":", 1)[1])
    h.routes["/docs"] = html(PAGE)
    h.routes["/gz"] = (200, {"Content-Type": "text/plain", "Content-Encoding": "gzip"}, b"x")
    answers = iter([["127.0.0.1"], ["10.9.9.9"]])  # a rebinding server's two answers
    asked: list[str] = []

    def rebinding(host: str, _port: int) -> list[str]:
        asked.append(host)
        return next(answers)

    pinned = FetchPolicy(allowed_domains=["docs.test"], allow_private=["127.0.0.1"])
    page = fetch(f"http://docs.test:{port}/docs", pinned, rebinding)
    assert page.status == 200 and asked == ["docs.test"]  # one lookup, that address used
    mapped = FetchPolicy(allowed_domains=["docs.test"])
    with pytest.raises(ValueError, match=r"non-public address \(::ffff:127\.0\.0\.1\)"):
        mapped.address("docs.test", 80, lambda host, port: ["::ffff:127.0.0.1"])
    for form in ("[::ffff:127.0.0.1]", "[::1]", "2130706433", "0177.0.0.1", "0x7f.1"):
        h.routes["/to"] = (302, {"Location": f"http://{form}:{port}/docs"}, b"")
        r = _fetch(LOCAL, base + "/to")
        assert r.is_error and "is not in web_fetch's allowed domains" in r.output, form
    seen = len(h.seen)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens: unused
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
    assert not _fetch(LOCAL, base + "/docs").is_error and h.seen[seen:] == ["/docs"]
    r = _fetch(LOCAL, base + "/gz")
    assert r.is_error and "answered in the gzip encoding, which is not read" in r.output
    with pytest.raises(FetchRefused):
        fetch(base + "/gz", LOCAL)
