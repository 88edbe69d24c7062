"""Sandbox policy as plain data: what a command (and a file tool) may touch.

The policy is serialised to JSON for the launcher process, so every field is a plain value.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any


class SandboxMode(StrEnum):
    READ_ONLY = "read-only"
    WORKSPACE_WRITE = "workspace-write"
    FULL_ACCESS = "full-access"


class SandboxLayer(StrEnum):
    """The layers a command can run under, in the order the report lists them (the confining
    ones first). One name each, defined here: the probe produces them, the runner, the
    launch spec and the front ends compare them, and `disabled_layers` holds them. The
    values are what `m3agent doctor`, the status bar and the JSON show, unchanged."""

    BWRAP = "bwrap"  # bubblewrap: mount and pid namespaces, the network namespace
    LANDLOCK = "landlock"  # the kernel's file-system (and TCP) rules
    SECCOMP = "seccomp"  # the system-call filter
    RLIMITS = "rlimits"  # CPU, memory, file size, processes; the session's write budget
    CGROUP = "cgroup"  # pids.max and whole-group kill
    TREE_KILL = "tree_kill"  # every descendant ends with the command
    ENV_SCRUB = "env_scrub"  # the environment passes by an allow-list
    PRIVILEGES = "privileges"  # no_new_privs, capabilities dropped


LAYERS = tuple(SandboxLayer)


def parse_layers(names: Iterable[str]) -> frozenset[SandboxLayer]:
    """Layer names as given (the CLI's --without, a policy's JSON, a test) as members;
    ValueError naming the unknown ones and the known ones."""
    given = set(names)
    unknown = given - set(LAYERS)
    if unknown:
        raise ValueError(f"unknown sandbox layer(s) {sorted(unknown)} (known: {', '.join(LAYERS)})")
    return frozenset(SandboxLayer(n) for n in given)


# Locations that hold credentials; "~" is the policy's home. They stay unreadable even in
# full-access mode for the file tools, and for commands wherever a layer can enforce it.
DEFAULT_SECRETS = (
    "~/.ssh",
    "~/.aws",
    "~/.config/gh",
    "~/.gnupg",
    "~/.netrc",
    "~/.docker/config.json",
    "~/.kube",
    "~/.azure",
    "~/.config/gcloud",
    "~/.git-credentials",
    "~/.npmrc",
    "~/.pypirc",
    "~/.pgpass",
    "~/.my.cnf",
    "~/.vault-token",
    "~/.config/rclone",
    "~/.config/hub",
    "~/.config/op",
    "~/.config/doctl",
    "~/.config/containers/auth.json",
    "~/.config/git/credentials",
    "~/.terraform.d/credentials.tfrc.json",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.gem/credentials",
    "~/.huggingface",
    "~/.cache/huggingface/token",
    "~/.oci",
    "~/.s3cfg",
    "~/.boto",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.bash_history",
    "~/.zsh_history",
    "~/.python_history",
    "~/.psql_history",
    "~/.mysql_history",
    "~/.node_repl_history",
    "~/.lesshst",
    "~/.claude/.credentials.json",
    "~/.codex/auth.json",
    "/run/secrets",
    "/run/user",
)
# Names in each writable root that commands may neither create, change, replace nor point
# elsewhere: the repository and m3agent's own per-project state, the snapshot's ignore file,
# the instruction files the next session reads into its prompt, and the other directories it
# reads definitions from (skills in .claude/skills and .agents/skills: app/extensions.py), so
# nothing the model writes speaks to a later session from its system prompt. The first two
# are directories: where absent, bubblewrap mounts an empty read-only directory in their place.
DEFAULT_PROTECTED = (
    ".git",
    ".m3agent",
    ".m3agentignore",
    "AGENTS.md",
    "CLAUDE.md",
    ".claude",
    ".agents",
)
PROTECTED_DIRS = frozenset({".git", ".m3agent"})
# Outside the workspace a command sees nothing of the home directory except these toolchain
# locations, read-only ("~" is the policy's home). Deliberately absent: ~/.cache (Hugging
# Face and other tokens live there), ~/.config, ~/.gitconfig, ~/.m2 and ~/.gradle (both hold
# repository credentials).
DEFAULT_HOME_ALLOW = (
    "~/.cargo/bin",
    "~/.rustup",
    "~/.pyenv",
    "~/.local/bin",
    "~/.local/lib",
    "~/.local/share/uv/python",
    "~/.nvm",
    "~/.bun/bin",
    "~/.deno/bin",
    "~/go/bin",
    "~/.sdkman/candidates",
    "~/.rbenv",
    "~/.elan",
    "~/.ghcup/bin",
    "~/miniconda3",
    "~/anaconda3",
    "~/.conda/envs",
)


def default_private_paths() -> tuple[Path, ...]:
    """m3agent's own data and config (sessions, checkpoints, API keys in config.toml): the
    same places app/settings.py uses. Read on the host only, never in the launcher."""
    import platformdirs

    env = os.environ
    out = [Path(env.get("M3AGENT_HOME") or platformdirs.user_data_dir("m3agent"))]
    if env.get("M3AGENT_CONFIG"):
        out.append(Path(env["M3AGENT_CONFIG"]))
    out.append(Path(platformdirs.user_config_dir("m3agent")))
    return tuple(Path(os.path.realpath(p)) for p in out)


@dataclass(frozen=True, slots=True)
class Limits:
    cpu_s: int = 300
    address_space_mb: int = 8192
    file_size_mb: int = 1024
    nproc: int = 512
    output_bytes: int = 200_000  # kept of each of stdout / stderr; the rest is cut with a note
    write_budget_mb: int = 8192  # net disk growth all of a session's commands may cause

    def __post_init__(self) -> None:
        for name in (
            "cpu_s",
            "address_space_mb",
            "file_size_mb",
            "nproc",
            "output_bytes",
            "write_budget_mb",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(
                    f"sandbox limit {name} must be positive, got {getattr(self, name)}"
                )


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    workspace: Path
    mode: SandboxMode = SandboxMode.WORKSPACE_WRITE
    network: bool = False
    extra_writable: tuple[Path, ...] = ()
    protected_names: tuple[str, ...] = DEFAULT_PROTECTED
    secret_paths: tuple[str, ...] = DEFAULT_SECRETS
    home: Path | None = None  # None: $HOME when the policy is used
    home_allow: tuple[str, ...] = DEFAULT_HOME_ALLOW
    env_allow: tuple[str, ...] = ()  # variable names passed on besides envscrub.ALLOWED
    private_paths: tuple[Path, ...] = field(default_factory=default_private_paths)
    limits: Limits = field(default_factory=Limits)
    # Run commands even when no layer can be applied (the CLI's --dangerously-no-sandbox).
    dangerously_no_sandbox: bool = False
    # Layers to treat as unavailable (a user opting out, or a test simulating a machine).
    disabled_layers: frozenset[SandboxLayer] = frozenset()
    # Directories whose files the file tools read even with other hard links (a pnpm store).
    hardlink_allow: tuple[str, ...] = ()
    # Commands may create AF_UNIX sockets (and so connect to any pathname socket they can see).
    allow_unix_sockets: bool = False
    # Paths that stay read-only inside the writable roots (the config's deny_write).
    deny_write: tuple[str, ...] = ()
    # Network through the host's allow-list proxy (network off otherwise): names it may reach.
    allowed_domains: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.mode, SandboxMode):
            try:
                object.__setattr__(self, "mode", SandboxMode(self.mode))
            except ValueError:
                modes = ", ".join(m.value for m in SandboxMode)
                raise ValueError(
                    f"unknown sandbox mode {self.mode!r} (use one of {modes})"
                ) from None
        # members from here on, whatever the caller passed (names from JSON or a test)
        object.__setattr__(self, "disabled_layers", parse_layers(self.disabled_layers))
        object.__setattr__(self, "workspace", Path(self.workspace).resolve())
        object.__setattr__(
            self, "extra_writable", tuple(Path(p).resolve() for p in self.extra_writable)
        )
        object.__setattr__(self, "private_paths", tuple(Path(p) for p in self.private_paths))

    # -- derived views -------------------------------------------------------------------
    def home_dir(self) -> Path:
        return Path(self.home or os.environ.get("HOME") or Path.home()).resolve()

    def writable_roots(self) -> tuple[Path, ...]:
        if self.mode is SandboxMode.READ_ONLY:
            return ()
        return (self.workspace, *self.extra_writable)

    def protected_paths(self) -> tuple[Path, ...]:
        """Subpaths of the writable roots that stay read-only (the protected names in each,
        and the deny_write rules that lie in one)."""
        named = [root / name for root in self.writable_roots() for name in self.protected_names]
        denied = [
            p
            for p in self.deny_write_paths()
            if any(p == r or r in p.parents for r in self.writable_roots())
        ]
        return tuple(dict.fromkeys([*named, *denied]))

    def deny_write_paths(self) -> tuple[Path, ...]:
        return tuple(Path(os.path.realpath(p)) for p in self._home_paths(self.deny_write))

    def secret_locations(self) -> tuple[Path, ...]:
        home = str(self.home_dir())
        out = []
        for s in self.secret_paths:
            p = Path(home + s[1:]) if s.startswith("~") else Path(s)
            out.append(Path(os.path.realpath(p)))
        return tuple(out)

    def _home_paths(self, entries: tuple[str, ...]) -> tuple[Path, ...]:
        home = str(self.home_dir())
        return tuple(Path(home + s[1:]) if s.startswith("~") else Path(s) for s in entries)

    def home_allowed(self) -> tuple[Path, ...]:
        """The allow-listed toolchain paths under home that exist (resolved)."""
        return tuple(
            dict.fromkeys(
                Path(os.path.realpath(p)) for p in self._home_paths(self.home_allow) if p.exists()
            )
        )

    def private_locations(self) -> tuple[Path, ...]:
        """m3agent's data/config paths that exist, minus any holding a writable root."""
        roots = (self.workspace, *self.writable_roots())
        return tuple(
            p
            for p in self.private_paths
            if os.path.lexists(p) and not any(r == p or p in r.parents for r in roots)
        )

    def hardlink_dirs(self) -> tuple[Path, ...]:
        """hardlink_allow entries; a relative one is taken in the workspace."""
        return tuple(
            Path(os.path.realpath(self.workspace / p))
            for p in self._home_paths(self.hardlink_allow)
        )

    def with_(self, **changes: Any) -> SandboxPolicy:
        return replace(self, **changes)

    # -- JSON for the launcher -----------------------------------------------------------
    def to_json(self) -> str:
        return json.dumps(
            {
                "workspace": str(self.workspace),
                "mode": self.mode.value,
                "network": self.network,
                "extra_writable": [str(p) for p in self.extra_writable],
                "protected_names": list(self.protected_names),
                "secret_paths": list(self.secret_paths),
                "home": str(self.home) if self.home else None,
                "home_allow": list(self.home_allow),
                "env_allow": list(self.env_allow),
                "private_paths": [str(p) for p in self.private_paths],
                "limits": {k: getattr(self.limits, k) for k in Limits.__slots__},
                "dangerously_no_sandbox": self.dangerously_no_sandbox,
                "disabled_layers": sorted(self.disabled_layers),
                "hardlink_allow": list(self.hardlink_allow),
                "allow_unix_sockets": self.allow_unix_sockets,
                "deny_write": list(self.deny_write),
                "allowed_domains": list(self.allowed_domains),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> SandboxPolicy:
        d = json.loads(text)
        return cls(
            workspace=Path(d["workspace"]),
            mode=SandboxMode(d["mode"]),
            network=bool(d["network"]),
            extra_writable=tuple(Path(p) for p in d["extra_writable"]),
            protected_names=tuple(d["protected_names"]),
            secret_paths=tuple(d["secret_paths"]),
            home=Path(d["home"]) if d.get("home") else None,
            home_allow=tuple(d["home_allow"]),
            env_allow=tuple(d["env_allow"]),
            private_paths=tuple(Path(p) for p in d["private_paths"]),
            limits=Limits(**d["limits"]),
            dangerously_no_sandbox=bool(d["dangerously_no_sandbox"]),
            disabled_layers=parse_layers(d["disabled_layers"]),
            hardlink_allow=tuple(d.get("hardlink_allow", ())),
            allow_unix_sockets=bool(d.get("allow_unix_sockets", False)),
            deny_write=tuple(d.get("deny_write", ())),
            allowed_domains=tuple(d.get("allowed_domains", ())),
        )


def env_files_outside(policy: SandboxPolicy) -> tuple[Path, ...]:
    """`.env` files in the workspace's ancestors and in home: secrets a layer can hide.

    (.env files elsewhere are refused by the file tools' path guard; a shell command can
    only be kept from files a layer knows by path.)
    """
    dirs = {policy.home_dir(), *policy.workspace.parents}
    out = []
    for d in sorted(dirs):
        try:
            for p in d.iterdir():
                if (p.name == ".env" or p.name.startswith(".env.")) and p.is_file():
                    out.append(p.resolve())
        except OSError:
            continue
    return tuple(out)


def hidden_paths(policy: SandboxPolicy) -> tuple[Path, ...]:
    """Existing secret and private locations that commands must not read."""
    found = [p for p in policy.secret_locations() if os.path.lexists(p)]
    return tuple(dict.fromkeys([*found, *policy.private_locations(), *env_files_outside(policy)]))
