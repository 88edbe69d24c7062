"""The one read policy for files the agent opens on the host (issue 36, class 1).

Commands run in the sandbox, which hides the home directory's secrets and m3agent's own data.
The agent itself opens files on the host too: the file tools (read_file, grep, glob, list_dir)
and the definitions a repository brings, which reach the model as text (skills' SKILL.md,
`.m3agent/commands/*.md`, agent files, AGENTS.md / CLAUDE.md in parent directories and the
files their `@path` lines import, project settings). A repository, or a model writing into one,
controls those paths: a `SKILL.md` can be a symlink to `~/.ssh/id_rsa`, an import can name
`~/.pgpass` or `/proc/self/environ`. So every such read is judged here, by where the file
really is:

- the path is resolved (symlinks and `..`) and the *target* judged;
- `/proc`, `/sys` and `/dev` are never read (the agent's environment, its memory maps, devices);
- the sandbox's secret locations (policy.secret_locations: `~/.ssh`, cloud credentials,
  `~/.pgpass`, `~/.vault-token`, rclone's config, shell histories ...), compared without regard
  to case, and `.env` / `*_history` files outside the workspace are never read;
- m3agent's own data and config (session logs, API keys in config.toml) are read only by the
  readers that look there on the user's behalf (`trusted`), never through a repository's path.

`refusal()` is that judgment; tools/paths.py applies it to the file tools (which may still
read the rest of the home directory, as before: the model asks for those paths in the open,
through approvals). `HostReader` adds what a definition or instruction file needs besides:

- a path the repository chose (a file in it, a name one of its files imports) may lead into
  the home directory only where a sandboxed command sees something (`confined`): no deny-list
  names every token a home holds;
- the file is opened without following any symlink (the checked, canonical path: a link
  swapped in after the check fails with ELOOP instead of being followed);
- it must be a regular file with one name (a hard link can be a second name of a secret);
- one lying outside the workspace and the user's own directories must belong to the user or
  root (an AGENTS.md another user left in `/home` or `/tmp` above the repository is not the
  user's instruction).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from .fdio import FsRefused, open_regular
from .sandbox.policy import SandboxPolicy

# Never read on the host: the agent's own environment and memory (/proc/self/environ holds its
# API keys), kernel state, devices.
SYSTEM_DIRS = ("/proc", "/sys", "/dev")
# Files outside the workspace kept by name, wherever they are: environment files and the
# history files of shells and REPLs (they hold passwords typed on a command line).
_HISTORY_SUFFIXES = ("_history", ".history", "histfile")
DEFAULT_LIMIT = 1_000_000
# The agents' own folders in the home directory, which instruction files import from (Claude
# Code documents `@~/.claude/...`); their credentials are in the secret list.
AGENT_DIRS = (".m3agent", ".claude")


class ReadRefused(Exception):
    """A path the host read policy does not open: `str()` is "PATH: why", `.why` the why."""

    def __init__(self, path: object, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.why = why


def _under(path: str, root: str) -> bool:
    """Whether the absolute, normalised `path` is `root` or lies below it (strings: this runs
    for every row grep returns)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


def _within(path: Path, root: Path) -> bool:
    return _under(str(path), str(root))


def _secret_name(path: Path) -> bool:
    name = path.name.casefold()
    return name == ".env" or name.startswith(".env.") or name.endswith(_HISTORY_SUFFIXES)


def realpath(path: Path) -> Path:
    """os.path.realpath; ReadRefused when a link it followed changed under it (a loop)."""
    try:
        return Path(os.path.realpath(path, strict=False))
    except OSError:
        raise ReadRefused(path, "changed while it was being checked (a link swapped)") from None


# policy.secret_locations() resolves every entry (45 realpaths): grep asks for each row, so
# the answer is kept for a moment (a link the user changes in their home counts 2 s later).
_SECRETS_TTL_S = 2.0
_secrets_memo: dict[tuple[str, tuple[str, ...]], tuple[float, tuple[str, ...]]] = {}


def _secret_roots(policy: SandboxPolicy) -> tuple[str, ...]:
    key = (str(policy.home_dir()), policy.secret_paths)
    now = time.monotonic()
    hit = _secrets_memo.get(key)
    if hit is None or now - hit[0] > _SECRETS_TTL_S:
        roots = tuple(str(s).casefold() for s in policy.secret_locations())
        if len(_secrets_memo) > 64:
            _secrets_memo.clear()
        hit = _secrets_memo[key] = (now, roots)
    return hit[1]


def refusal(path: Path, policy: SandboxPolicy, trusted: tuple[Path, ...] = ()) -> str | None:
    """Why the resolved `path` is never read (or written) on the host, or None. `trusted`:
    resolved directories or files the caller reads on the user's behalf, where m3agent's own
    private locations may be read (the user's skills when $M3AGENT_HOME holds them)."""
    shown = str(path)
    if any(_under(shown, d) for d in SYSTEM_DIRS):
        return "a system location (/proc, /sys, /dev): never read on the host"
    folded = shown.casefold()  # `~/.SSH` on a case-insensitive file system is `~/.ssh`
    if any(_under(folded, s) for s in _secret_roots(policy)):
        return "a secret location (the sandbox policy's secret_paths)"
    if not _under(shown, str(policy.workspace)) and _secret_name(path):
        return "a secret file outside the workspace (an .env file or a history)"
    if any(_under(shown, str(t)) for t in trusted):
        return None
    if any(_under(shown, str(p)) for p in policy.private_locations()):
        return "m3agent's own data or config"
    return None


@dataclass(frozen=True, slots=True)
class HostReader:
    """Reads definition and instruction files under the policy (see the module docstring).

    `trusted`: the user's own directories and files (as given, resolved here), read on their
    behalf: m3agent's private locations may be read there and their owner is not checked.

    `confined` (the default): the repository chose the path (a file in it, or a name one of
    its files gave), so in the home directory it may only lead where a sandboxed command
    sees something: the workspace, the extra writable roots, the toolchains of
    policy.home_allow, and the Markdown files of the agents' own folders (~/.m3agent,
    ~/.claude: what instruction files import; their settings may hold tokens). A
    secret list cannot name every token a home holds; the sandbox's view does not need to.
    `unconfined()` is for files the user wrote (their ~/.m3agent/AGENTS.md, a parent
    directory's AGENTS.md they own) and what those import."""

    policy: SandboxPolicy
    trusted: tuple[Path, ...] = ()
    confined: bool = True
    # Directories a confined read may lead into beside the sandbox's view: the rest of the
    # workspace's repository above it, for that repository's own files (agent/instructions.py).
    also_shown: tuple[Path, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "trusted", tuple(realpath(Path(t)) for t in self.trusted))
        object.__setattr__(self, "also_shown", tuple(realpath(Path(d)) for d in self.also_shown))

    def check(self, path: Path) -> Path:
        """The canonical path of `path` when the policy lets it be read; ReadRefused else."""
        real = realpath(Path(path).absolute())
        why = refusal(real, self.policy, self.trusted)
        if why is None and self.confined and self._hidden_home(real):
            why = "in the home directory where the sandbox shows nothing; a repository's path may not lead there"
        if why is not None:
            raise ReadRefused(path, f"not read ({why})")
        return real

    def unconfined(self) -> HostReader:
        """This reader for a path the user chose (see the class docstring)."""
        return replace(self, confined=False)

    def confined_to_view(self) -> HostReader:
        """This reader for a path the repository chose."""
        return replace(self, confined=True)

    def _trusted(self, real: Path) -> bool:
        return any(_within(real, t) for t in self.trusted)

    def _foreign(self, path: Path, real: Path, st: os.stat_result) -> bool:
        """Outside the workspace, the file, or the link naming it (one another user planted
        in /tmp above the repository), belongs to neither the user nor root."""
        ours = (os.geteuid(), 0)
        workspace = self.policy.workspace
        if st.st_uid not in ours and not _within(real, workspace):
            return True
        try:
            entry = os.lstat(path)
        except OSError:
            return True  # gone since it was opened: not the file that was checked
        lexical = Path(os.path.normpath(Path(path).absolute()))
        return entry.st_uid not in ours and not _within(lexical, workspace)

    def _hidden_home(self, real: Path) -> bool:
        """Whether `real` lies in the home directory outside what a sandboxed command sees."""
        policy = self.policy
        home = policy.home_dir()
        if not _within(real, home) or self._trusted(real):
            return False
        shown = (policy.workspace, *policy.extra_writable, *policy.home_allowed(), *self.also_shown)
        if any(_within(real, v) for v in shown):
            return False
        # the agents' folders: their instruction files only (a settings.json may hold tokens)
        return not (
            real.suffix.casefold() == ".md" and any(_within(real, home / d) for d in AGENT_DIRS)
        )

    def read_bytes(self, path: Path, limit: int = DEFAULT_LIMIT) -> bytes:
        """The bytes of `path` (at most `limit`: a larger file is refused), checked and opened
        as the module docstring says; ReadRefused when it may not be read or cannot be."""
        return self.read(path, limit)[1]

    def read(self, path: Path, limit: int = DEFAULT_LIMIT) -> tuple[Path, bytes]:
        """(the canonical path, the bytes) of `path`, as read_bytes."""
        real = self.check(path)
        trusted = self._trusted(real)
        try:  # no symlink is followed: `real` has none, and one swapped in fails (ELOOP)
            fd = open_regular(real, str(path), links_ok=trusted)
        except FsRefused as e:  # its message starts with the path, as ours do
            raise ReadRefused(path, str(e).removeprefix(f"{path}: ")) from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not trusted and self._foreign(Path(path), real, st):
                raise ReadRefused(path, "not read (owned by another user, outside the workspace)")
            if st.st_size > limit:
                raise ReadRefused(path, f"not read (larger than {limit} bytes)")
            return real, f.read(limit)

    def settings_text(self, path: Path) -> str:
        """read_text for a settings file's parser (engine/json_file.read_json's `read`): a
        refusal is the ValueError naming the file that such a parser reports."""
        try:
            return self.read_text(path)
        except ReadRefused as e:
            raise ValueError(str(e)) from None

    def read_text(self, path: Path, limit: int = DEFAULT_LIMIT) -> str:
        """read_bytes as UTF-8 text; ReadRefused when it is not UTF-8."""
        try:
            return self.read_bytes(path, limit).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ReadRefused(path, f"unreadable ({e})") from None


def default_reader(workspace: Path) -> HostReader:
    """The reader for `workspace` under the default sandbox policy (no user directories)."""
    return HostReader(SandboxPolicy(workspace=Path(workspace).resolve()))
