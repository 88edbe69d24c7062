"""The host side of `network = "allowlist"`: an HTTP CONNECT proxy on a unix socket.

Under bubblewrap a command in allow-list mode has its own network namespace (loopback only)
and seccomp allows AF_INET there; the launcher listens on 127.0.0.1:PROXY_PORT inside and
forwards each connection to this proxy's unix socket, bound into the sandbox (forward.py).
So the proxy is the only way out, and it decides per request:

- the name must match `allowed_domains` (exactly, or `*.example.com` for its subdomains);
- every address the name resolves to must be public: loopback, link-local (the cloud
  metadata service 169.254.169.254 among them), private, shared, multicast, reserved and
  unspecified addresses are refused, so an allowed name cannot be pointed at the host or the
  LAN (DNS rebinding included: the connection goes to the address that was checked, never
  to a second lookup);
- only CONNECT (TLS and any other protocol tunnelled), to ports 443 and 80 by default.

`pinned` maps names to fixed (address, port) destinations that skip the public-address
check: the tests' stand-in for an allowed domain, a real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path

PROXY_PORT = 3128  # inside the sandbox's own network namespace
MAX_HEAD = 8192
Resolver = Callable[[str, int], Sequence[str]]


def _getaddrinfo(host: str, port: int) -> list[str]:
    return [str(ai[4][0]) for ai in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def matches(host: str, allowed: Sequence[str]) -> bool:
    host = host.lower().rstrip(".")
    for pattern in allowed:
        p = pattern.lower()
        if p.startswith("*.") and host.endswith(p[1:]) and host != p[2:]:
            return True
        if host == p:
            return True
    return False


_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: a provider's private space
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known NAT64 prefix


def _carried_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a relay or translator delivers an IPv6 one to: 6to4, Teredo's client,
    or NAT64 (Python's ipaddress judges these by their IPv6 prefix alone)."""
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return not (
        ip.is_loopback
        or ip.is_link_local
        or ip.is_private
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or (isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED)
        or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local)
    )


def public_address(addr: str) -> bool:
    """False for every address a proxy must never reach on a name's behalf. An IPv6 address
    that carries an IPv4 one (6to4, Teredo, NAT64) is judged by both, since a relay or
    translator on the path delivers it to the IPv4 address it carries."""
    ip = ipaddress.ip_address(addr.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:  # the IPv4 address itself, in IPv6 notation
            return _public(ip.ipv4_mapped)
        carried = _carried_ipv4(ip)
        if carried is not None and not _public(carried):
            return False
    return _public(ip)


class AllowlistProxy:
    def __init__(
        self,
        socket_path: Path,
        allowed: Sequence[str],
        ports: Sequence[int] = (443, 80),
        resolve: Resolver = _getaddrinfo,
        pinned: dict[str, tuple[str, int]] | None = None,
    ) -> None:
        self.path, self.allowed, self.ports = Path(socket_path), tuple(allowed), tuple(ports)
        self.resolve, self.pinned = resolve, dict(pinned or {})
        # (host:port, "allowed" | why refused), the last 1000: doctor-style evidence, bounded
        self.log: deque[tuple[str, str]] = deque(maxlen=1000)
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(str(self.path))
        os.chmod(self.path, 0o600)
        self._srv.listen(64)
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="m3-proxy").start()

    def close(self) -> None:
        self._stop.set()
        try:
            self._srv.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._srv.close()
        self.path.unlink(missing_ok=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def decide(self, host: str, port: int) -> tuple[str, int] | str:
        """The (address, port) to connect to, or why not (one line)."""
        if not matches(host, self.allowed):
            return f"{host} is not in the sandbox's allowed_domains"
        if host.lower() in self.pinned:
            return self.pinned[host.lower()]
        if port not in self.ports:
            return f"port {port} is not allowed (only {', '.join(map(str, self.ports))})"
        try:
            addrs = list(self.resolve(host, port))
        except OSError as e:
            return f"{host} does not resolve ({e})"
        bad = [a for a in addrs if not public_address(a)]
        if not addrs or bad:
            return f"{host} resolves to a non-public address ({', '.join(bad) or 'none'})"
        return addrs[0], port

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(30)
            head = b""
            try:
                while b"\r\n\r\n" not in head and len(head) < MAX_HEAD:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    head += chunk
            except OSError:
                return
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split()
            if len(parts) != 3 or parts[0] != "CONNECT" or ":" not in parts[1]:
                return self._refuse(conn, "405 Method Not Allowed", line, "only CONNECT")
            host, _, port_s = parts[1].rpartition(":")
            host = host.strip("[]")
            if not port_s.isdigit():
                return self._refuse(conn, "400 Bad Request", parts[1], "bad port")
            where = self.decide(host, int(port_s))
            if isinstance(where, str):
                return self._refuse(conn, "403 Forbidden", parts[1], where)
            try:
                upstream = socket.create_connection(where, timeout=10)
            except OSError as e:
                return self._refuse(conn, "502 Bad Gateway", parts[1], str(e))
            self.log.append((parts[1], "allowed"))
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.split(b"\r\n\r\n", 1)[1]
            with upstream:
                if rest:
                    upstream.sendall(rest)
                relay(conn, upstream)

    def _refuse(self, conn: socket.socket, status: str, target: str, why: str) -> None:
        self.log.append((target, why))
        body = f"m3agent sandbox proxy: {why}\n".encode()
        try:
            conn.sendall(
                f"HTTP/1.1 {status}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
        except OSError:
            pass


def relay(a: socket.socket, b: socket.socket) -> None:
    """Copy both ways until either side closes (one thread per direction)."""
    a.settimeout(None)
    b.settimeout(None)

    def pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (dst, src):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    t = threading.Thread(target=pump, args=(b, a), daemon=True)
    t.start()
    pump(a, b)
    t.join(timeout=30)
