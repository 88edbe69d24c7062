"""The config's `[sandbox]` table: path rules and the network mode, as policy fields.

```toml
[sandbox]
mode = "workspace-write"            # or the top-level `sandbox = "..."` as before
network = "allowlist"               # "off" (default), "on", "allowlist"
allowed_domains = ["pypi.org", "*.pythonhosted.org"]
allow_read = ["~/datasets"]         # shown read-only although under the hidden home
allow_write = ["/srv/build"]        # writable roots besides the workspace (like --add-dir)
deny_read = ["~/work/secrets"]      # unreadable, for commands and file tools (like ~/.ssh)
deny_write = ["~/proj/vendor"]      # read-only even inside a writable root
allow_unix_sockets = false          # AF_UNIX for commands (bubblewrap only); see docs
hardlink_allow = ["node_modules"]   # file tools read files with other hard links here
```

Names follow sandbox-runtime's (allowWrite, denyRead, denyWrite, allowedDomains,
allowUnixSockets) in this project's snake case. Each rule maps onto a mechanism the layers
already enforce: deny_read joins the secret list (bubblewrap masks it, Landlock leaves it
out, the file tools refuse it), allow_read the home allow-list, allow_write the writable
roots, deny_write the protected paths (bound read-only by bubblewrap, no Landlock write
right, refused by the file tools). Secrets stay secret: allow_read never re-opens one.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

NETWORK_MODES = ("off", "on", "allowlist")
_LISTS: tuple[str, ...] = ("allow_read", "allow_write", "deny_read", "deny_write", "hardlink_allow")
_LISTS += ("allowed_domains",)


@dataclass(frozen=True, slots=True)
class SandboxRules:
    network: str = "off"
    allowed_domains: tuple[str, ...] = ()
    allow_read: tuple[str, ...] = ()
    allow_write: tuple[str, ...] = ()
    deny_read: tuple[str, ...] = ()
    deny_write: tuple[str, ...] = ()
    allow_unix_sockets: bool = False
    hardlink_allow: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.network not in NETWORK_MODES:
            raise ValueError(
                f"[sandbox] network = {self.network!r}: use one of {', '.join(NETWORK_MODES)}"
            )
        for name in _LISTS:
            value = getattr(self, name)
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"[sandbox] {name} must be a list of strings")
            object.__setattr__(self, name, tuple(value))
        if self.network == "allowlist" and not self.allowed_domains:
            raise ValueError('[sandbox] network = "allowlist" needs allowed_domains')
        for d in self.allowed_domains:
            if not _domain_ok(d):
                raise ValueError(f"[sandbox] allowed_domains: {d!r} is not a domain name")
        for name in ("allow_read", "allow_write", "deny_read", "deny_write"):
            for p in getattr(self, name):
                if not (p.startswith("/") or p.startswith("~")):
                    raise ValueError(f"[sandbox] {name}: {p!r} must be absolute or start with ~")
        if not isinstance(self.allow_unix_sockets, bool):
            raise ValueError("[sandbox] allow_unix_sockets must be true or false")

    @classmethod
    def from_table(cls, table: dict[str, Any]) -> SandboxRules:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(table) - known - {"mode"})
        if unknown:
            raise ValueError(f"[sandbox]: unknown setting(s) {', '.join(unknown)}")
        return cls(**{k: v for k, v in table.items() if k in known})

    def policy_fields(self, home: Path | None = None) -> dict[str, Any]:
        """What SandboxPolicy(...) takes from these rules, on top of its defaults."""
        from m3agent.tools.sandbox.policy import DEFAULT_HOME_ALLOW, DEFAULT_SECRETS

        return {
            "network": self.network == "on",
            "allowed_domains": self.allowed_domains if self.network == "allowlist" else (),
            "secret_paths": (*DEFAULT_SECRETS, *self.deny_read),
            "home_allow": (*DEFAULT_HOME_ALLOW, *self.allow_read),
            "extra_writable": tuple(_abs(p, home) for p in self.allow_write),
            "deny_write": self.deny_write,
            "allow_unix_sockets": self.allow_unix_sockets,
            "hardlink_allow": self.hardlink_allow,
        }

    def describe(self) -> list[str]:
        """One line per rule that is set (doctor)."""
        rows = []
        net = self.network
        if net == "allowlist":
            net += f" ({', '.join(self.allowed_domains)}) through the host's proxy"
        rows.append(f"network {net}")
        for name in ("allow_read", "allow_write", "deny_read", "deny_write", "hardlink_allow"):
            if getattr(self, name):
                rows.append(f"{name} {', '.join(getattr(self, name))}")
        if self.allow_unix_sockets:
            rows.append("allow_unix_sockets true (bubblewrap only)")
        return rows


def _abs(p: str, home: Path | None) -> Path:
    base = str(home or os.environ.get("HOME") or Path.home())
    return Path(base + p[1:]) if p.startswith("~") else Path(p)


def _domain_ok(d: str) -> bool:
    name = d[2:] if d.startswith("*.") else d
    labels = name.split(".")
    return len(labels) >= 2 and all(
        lab and len(lab) <= 63 and all(c.isalnum() or c == "-" for c in lab) for lab in labels
    )
