"""`network = "allowlist"`: the host's CONNECT proxy is the sandbox's only way out.

A real local HTTP server stands in for an allowed domain: the proxy's resolver maps the
name to it (`pinned`, the one seam that skips the public-address check). Each attempt
asserts what the server received; the controls show the same request reaching it when the
rule allows it.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.proxy import AllowlistProxy, matches, public_address
from m3agent.tools.sandbox.runner import Sandbox
from sandbox_support import make_sandbox

CLIENT = r"""
import http.client, json, socket, sys
host, direct = sys.argv[1], int(sys.argv[2])
out = {}
c = http.client.HTTPConnection("127.0.0.1", 3128, timeout=10)
c.set_tunnel(host, 443)
try:
    c.request("GET", "/x")
    out["body"] = c.getresponse().read().decode()
except OSError as e:
    out["error"] = str(e)
try:
    socket.create_connection(("127.0.0.1", direct), timeout=3).sendall(b"GET /direct HTTP/1.0\r\n\r\n")
    out["direct"] = "connected"
except OSError as e:
    out["direct"] = e.errno
print(json.dumps(out))
"""


@pytest.fixture
def site():
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ALLOWED-SITE-BODY")

        def log_message(self, *args):
            pass

    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1], hits
    srv.shutdown()


def _sandbox(config, world, allowed, **proxy_kw) -> Sandbox:
    sb = make_sandbox(config, world, {"allowed_domains": tuple(allowed)})
    where = Path(tempfile.mkdtemp(prefix="m3-proxy-test-")) / "p.sock"
    sb.proxy = AllowlistProxy(where, allowed, **proxy_kw)
    return sb


def _client(sb: Sandbox, world, host: str, port: int) -> dict:
    r = sb.run(["python3", "-c", CLIENT, host, str(port)], cwd=world.ws, timeout_s=40)
    assert r.started, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_allowed_domain_reaches_its_server(world, site):
    port, hits = site
    sb = _sandbox("bwrap", world, ["allowed.test"], pinned={"allowed.test": ("127.0.0.1", port)})
    got = _client(sb, world, "allowed.test", port)
    assert got["body"] == "ALLOWED-SITE-BODY" and hits == ["/x"]
    assert got["direct"] != "connected"  # the server itself is not reachable past the proxy


def test_name_off_the_list_is_refused(world, site):
    port, hits = site
    sb = _sandbox("bwrap", world, ["allowed.test"], pinned={"evil.test": ("127.0.0.1", port)})
    got = _client(sb, world, "evil.test", port)
    assert "403" in got.get("error", "") and hits == []
    assert ("evil.test:443", "evil.test is not in the sandbox's allowed_domains") in sb.proxy.log


def test_control_same_name_on_the_list_reaches(world, site):
    port, hits = site
    sb = _sandbox("bwrap", world, ["evil.test"], pinned={"evil.test": ("127.0.0.1", port)})
    assert _client(sb, world, "evil.test", port)["body"] == "ALLOWED-SITE-BODY"
    assert hits == ["/x"]


@pytest.mark.parametrize(
    "addr", ["127.0.0.1", "169.254.169.254", "10.1.2.3", "::1", "fd00:ec2::254"]
)
def test_allowed_name_resolving_inward_is_refused(world, site, addr):
    """DNS pointing an allowed name at loopback, the metadata service or the LAN."""
    port, hits = site
    sb = _sandbox("bwrap", world, ["rebind.test"], resolve=lambda h, p: [addr])
    got = _client(sb, world, "rebind.test", port)
    assert "403" in got.get("error", "") and hits == []
    assert any("non-public" in why for _, why in sb.proxy.log)


def test_direct_connection_with_network_on_control(world, site):
    port, hits = site
    sb = make_sandbox("bwrap", world, {"network": True})
    r = sb.run(["python3", "-c", CLIENT, "x.test", str(port)], cwd=world.ws, timeout_s=40)
    assert '"direct": "connected"' in r.stdout, r.stderr


def test_without_bwrap_allowlist_keeps_the_network_off(world, site):
    port, hits = site
    sb = _sandbox("no-bwrap", world, ["allowed.test"], pinned={"allowed.test": ("127.0.0.1", port)})
    got = _client(sb, world, "allowed.test", port)
    assert "body" not in got and got["direct"] != "connected" and hits == []


def test_address_rules():
    for a in ("127.0.0.1", "10.0.0.1", "192.168.1.1", "172.16.0.1", "169.254.169.254",
              "100.64.0.1", "0.0.0.0", "224.0.0.1", "::1", "fe80::1", "fd00::1",
              "::ffff:127.0.0.1",
              # IPv6 forms that carry a private IPv4 address to a relay or translator
              "2002:7f00:1::", "2002:a9fe:a9fe::1", "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe",
              "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
              "fec0::1"):  # site-local  # fmt: skip
        assert not public_address(a), a
    assert public_address("93.184.216.34") and public_address("2606:4700::1111")
    # a 6to4 address carrying a public one stays public; so does a mapped public one
    assert public_address("2002:5db8:d822::1") and public_address("::ffff:93.184.216.34")
    assert matches("files.pythonhosted.org", ["*.pythonhosted.org"])
    assert not matches("pythonhosted.org", ["*.pythonhosted.org"])
    assert not matches("pypi.org.evil.test", ["pypi.org"]) and matches("PyPI.org.", ["pypi.org"])


def test_proxy_only_tunnels(tmp_path):
    p = AllowlistProxy(tmp_path / "p.sock", ["allowed.test"])
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(str(tmp_path / "p.sock"))
        s.sendall(b"GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 405")
    finally:
        p.close()


def test_policy_round_trip_keeps_domains(world):
    pol = SandboxPolicy(workspace=world.ws, allowed_domains=("a.test",))
    assert SandboxPolicy.from_json(pol.to_json()).allowed_domains == ("a.test",)


NS = "]<]minimax[>["
E2E = (
    "import http.client\n"
    "for host in ('evil.test', 'allowed.invalid'):\n"
    "    c = http.client.HTTPConnection('127.0.0.1', 3128, timeout=10)\n"
    "    c.set_tunnel(host, 443)\n"
    "    try:\n"
    "        c.request('GET', '/')\n"
    "    except OSError as e:\n"
    "        print(host, 'REFUSED', e)\n"
)


def test_config_allowlist_through_the_installed_script(tmp_path, world):
    """[sandbox] network = "allowlist" from config.toml reaches the shell tool's sandbox:
    a name off the list and an allowed name that does not resolve are both refused (403)."""
    make_sandbox("bwrap", world)  # skips where bubblewrap is unavailable
    (world.ws / "probe.py").write_text(E2E)
    home = tmp_path / "m3home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[sandbox]\nnetwork = "allowlist"\nallowed_domains = ["allowed.invalid"]\n'
    )
    call = (
        f'</mm:think>{NS}<tool_call>\n{NS}<invoke name="shell">'
        f"{NS}<command>python3 probe.py{NS}</command>{NS}</invoke>\n{NS}</tool_call>"
    )
    script = tmp_path / "s.json"
    script.write_text(json.dumps([call, "</mm:think>done"]))
    env = dict(os.environ, M3AGENT_HOME=str(home))
    env.pop("M3AGENT_CONFIG", None)
    exe = Path(sys.executable).with_name("m3agent")
    r = subprocess.run(
        [str(exe), "run", "go", "--engine", "scripted", "--script", str(script), "--cwd",
         str(world.ws), "--output-format", "stream-json", "--approval", "never"],
        env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    done = [json.loads(x) for x in r.stdout.splitlines() if '"tool_call_finished"' in x]
    assert done, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    out = done[0]["output"]
    assert "evil.test REFUSED Tunnel connection failed: 403" in out, out
    assert "allowed.invalid REFUSED Tunnel connection failed: 403" in out, out
