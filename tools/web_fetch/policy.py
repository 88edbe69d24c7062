"""Where web_fetch may go: the config's `[web_fetch]` table, deny by default.

```toml
[web_fetch]
allowed_domains = ["docs.python.org", "*.readthedocs.io"]  # nothing else is fetched
allow_private = []      # hosts or networks that may be private: ["127.0.0.1"], ["10.0.0.0/8"]
max_bytes = 5000000     # of a response body; the rest is not read
max_chars = 40000       # of the page's text handed to the model per call (offset reads on)
timeout_s = 20
```

A name matches an entry exactly, or `*.example.com` matches its subdomains (the sandbox
proxy's rule, tools/sandbox/proxy.py). Claude Code's permission rules `WebFetch(domain:NAME)`
add to (allow) or take from (deny) the list (app/web_fetch_settings.py). Every address a name
resolves to must be public (no loopback, link-local, private, shared or reserved address),
unless `allow_private` names the host or a network holding the address; the connection goes
to the address that was checked, never to a second lookup.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from ..sandbox.proxy import matches, public_address

Resolver = Callable[[str, int], Sequence[str]]
_LISTS = ("allowed_domains", "denied_domains", "allow_private")


def _getaddrinfo(host: str, port: int) -> list[str]:
    return [str(ai[4][0]) for ai in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _name_ok(entry: str) -> bool:
    name = entry[2:] if entry.startswith("*.") else entry
    labels = name.split(".")
    return bool(name) and all(
        lab and len(lab) <= 63 and all(c.isalnum() or c == "-" for c in lab) for lab in labels
    )


def _network(entry: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    allowed_domains: tuple[str, ...] = ()
    denied_domains: tuple[str, ...] = ()  # from deny rules: refused even when allowed
    allow_private: tuple[str, ...] = ()
    max_bytes: int = 5_000_000
    max_chars: int = 40_000
    timeout_s: float = 20.0
    max_redirects: int = 5

    def __post_init__(self) -> None:
        for name in _LISTS:
            value = getattr(self, name)
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"[web_fetch] {name} must be a list of strings")
            object.__setattr__(self, name, tuple(v.strip().lower().rstrip(".") for v in value))
        for d in (*self.allowed_domains, *self.denied_domains):
            if not _name_ok(d):
                raise ValueError(f"[web_fetch] {d!r} is not a domain name or address")
        for p in self.allow_private:
            if not (_name_ok(p) or _network(p)):
                raise ValueError(f"[web_fetch] allow_private: {p!r} is not a host or network")
        for name in ("max_bytes", "max_chars", "timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"[web_fetch] {name} must be a positive number")

    @classmethod
    def from_table(cls, table: dict[str, Any]) -> FetchPolicy:
        known = {f.name for f in fields(cls)} - {"denied_domains", "max_redirects"}
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(f"[web_fetch]: unknown setting(s) {', '.join(unknown)}")
        return cls(**table)

    @staticmethod
    def name_ok(entry: str) -> bool:
        """Whether an allowed or denied entry is a name, `*.name` or an address."""
        return _name_ok(entry.strip().lower().rstrip("."))

    def with_domains(self, allowed: Sequence[str], denied: Sequence[str]) -> FetchPolicy:
        """This policy with more allowed and denied names (permission rules)."""
        return replace(
            self,
            allowed_domains=tuple(dict.fromkeys((*self.allowed_domains, *allowed))),
            denied_domains=tuple(dict.fromkeys((*self.denied_domains, *denied))),
        )

    def host_refusal(self, host: str) -> str | None:
        """Why a host may not be fetched (one line), or None."""
        if matches(host, self.denied_domains):
            return f"{host} is denied by a WebFetch(domain:...) rule"
        if not matches(host, self.allowed_domains):
            return (
                f"{host} is not in web_fetch's allowed domains; the user can add it to "
                "[web_fetch] allowed_domains in the config, or allow WebFetch(domain:"
                f"{host})"
            )
        return None

    def _private_ok(self, host: str, addr: str) -> bool:
        if matches(host, [p for p in self.allow_private if _network(p) is None]):
            return True
        ip = ipaddress.ip_address(addr.split("%", 1)[0])
        nets = [n for n in map(_network, self.allow_private) if n is not None]
        return any(ip.version == n.version and ip in n for n in nets)

    def address(self, host: str, port: int, resolve: Resolver = _getaddrinfo) -> str:
        """The address to connect to (checked); ValueError saying why none may be used."""
        try:
            addrs = list(resolve(host, port))
        except OSError as e:
            raise ValueError(f"{host} does not resolve ({e})") from None
        bad = [a for a in addrs if not public_address(a) and not self._private_ok(host, a)]
        if not addrs or bad:
            raise ValueError(
                f"{host} resolves to a non-public address ({', '.join(bad) or 'none'}); "
                "[web_fetch] allow_private lets the user allow one"
            )
        return addrs[0]
