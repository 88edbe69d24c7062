"""What the repository snapshot must never read, whatever the repository or the user's rules say.

The snapshot is sent to the model, so a secret in it is a secret sent away. Four guards, each
applied to every candidate file (files.py, scan.py), none of which `.m3agentignore`,
`context_skip` re-includes (`!pattern`) or `use_builtin_rules=False` can switch off:

- **Names**: key files, credentials, `.env*`, tokens' usual homes (`SECRET_NAMES`).
- **Content**: private-key blocks and well-known token shapes (`SECRET_CONTENT`).
- **Paths**: a file is opened one component at a time from the root with O_NOFOLLOW, so no
  path goes through a symlinked directory (a tracked `conf/` replaced by a link to `~/.aws`);
  a path with `..`, `.` or an empty component is refused outright.
- **Links**: a file with other hard links (st_nlink > 1) may be a secret's second name.

`workspace_refusal` keeps a session from starting in `$HOME`, `/` or a directory holding them
(where the whole home would be the "repository"), unless the user insists (`--allow-home`).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

# gitignore syntax (a pattern without "/" matches the name at any depth; "dir/" a directory).
SECRET_NAMES: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.env",
    ".envrc",
    ".flaskenv",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.ppk",
    "*.kdbx",
    "*.keytab",
    "*.gpg",
    "*.pgp",
    "*.tfstate",
    "*.tfstate.*",
    "*.tfvars",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "*_rsa",
    "*_ed25519",
    "known_hosts",
    "authorized_keys",
    ".netrc",
    "_netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".gitcredentials",
    ".pgpass",
    ".my.cnf",
    ".htpasswd",
    ".boto",
    ".s3cfg",
    ".vault-token",
    ".terraformrc",
    "terraform.rc",
    ".dockercfg",
    "credentials",
    "credentials.*",
    "*credentials*.json",
    "*.credentials",
    "service-account*.json",
    "secrets.*",
    ".secrets",
    "*.secret",
    "*.secrets",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".psql_history",
    ".mysql_history",
    ".lesshst",
    ".viminfo",
    ".ssh/",
    ".aws/",
    ".gnupg/",
    ".kube/",
    ".azure/",
    ".docker/",
    ".password-store/",
    ".config/gh/",
    ".config/gcloud/",
    ".config/hub",
    ".local/share/keyrings/",
    ".mozilla/",
    ".config/google-chrome/",
    ".config/chromium/",
    ".thunderbird/",
)

# (why, pattern): shapes of private keys and tokens that are secret wherever they appear.
SECRET_CONTENT: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (why, re.compile(rx))
    for why, rx in (
        ("a private key", r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY( BLOCK)?-----"),
        ("a GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})"),
        # AWS's documentation writes its example ids with the suffix EXAMPLE
        # (AKIAIOSFODNN7EXAMPLE): a real id never ends so, those are not refused
        ("an AWS access key", r"\b(?:AKIA|ASIA|AIDA|AROA)(?![0-9A-Z]{9}EXAMPLE\b)[0-9A-Z]{16}\b"),
        # a secret access key is 40 characters of base64's alphabet; a name on the right
        # (`aws_secret_access_key=aws_secret_access_key`, boto3) is not one
        (
            "an AWS secret key",
            r"(?i)aws_secret_access_key\s*[=:]\s*[\"']?[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])",
        ),
        ("a GitLab token", r"\bglpat-[A-Za-z0-9_-]{20,}"),
        ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        ("a Slack webhook", r"hooks\.slack\.com/services/T[A-Za-z0-9_/]{20,}"),
        ("an API key", r"\bsk-(?:proj-|ant-|live_|test_)?[A-Za-z0-9_-]{32,}"),
        ("a Hugging Face token", r"\bhf_[A-Za-z0-9]{30,}"),
        ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
        ("a Stripe key", r"\b[rs]k_live_[0-9A-Za-z]{20,}"),
    )
)


def secret_in_text(text: str) -> str | None:
    """What secret-shaped content the text holds, or None."""
    for why, rx in SECRET_CONTENT:
        if rx.search(text):
            return why
    return None


# The literals each SECRET_CONTENT pattern cannot match without, as they show in a file's
# words (runs of [A-Za-z0-9_], each between spaces in `words`): words that start with a prefix
# (" ghp_"), or whole words (" BEGIN "; the patterns' `\b...-` and `[ -]` split words). `\b`
# in the patterns is a split point here too, so a match always leaves a literal among the
# words. One (prefixes, whole words) pair per pattern, in SECRET_CONTENT's order; the AWS
# secret-key pattern, case-insensitive, has its own check (_AWS_SECRET).
_LITERALS: tuple[tuple[tuple[bytes, ...], tuple[bytes, ...]], ...] = tuple(
    (
        tuple(b" " + w for w in prefixes.encode().split()),
        tuple(b" " + w + b" " for w in whole.encode().split()),
    )
    for prefixes, whole in (
        ("", "BEGIN"),
        ("ghp_ gho_ ghu_ ghs_ ghr_ github_pat_", ""),
        ("AKIA ASIA AIDA AROA", ""),
        ("", ""),  # aws_secret_access_key
        ("", "glpat"),
        ("", "xoxa xoxb xoxp xoxo xoxs xoxr"),
        ("", "slack"),
        ("", "sk"),
        ("hf_", ""),
        ("AIza", ""),
        ("sk_live_ rk_live_", ""),
    )
)
_AWS_SECRET = b"aws_secret_access_key"  # matched case-insensitively by its pattern
# Characters that Unicode case folding maps onto the ASCII letters of that pattern (long s,
# Kelvin sign): a file holding one is checked by the pattern itself.
_FOLDS_TO_ASCII = ("\u017f", "\u212a")


def secret_in(text: str, words: bytes, ascii_only: bool) -> str | None:
    """secret_in_text(text), with a literal pre-filter per pattern: `words` is the file's
    unique words joined by spaces (with a space at each end), as scan.py computes them for
    ranking. A pattern runs only where one of its literals occurs (none for most files), so
    the first pattern that matches is the one secret_in_text reports: nothing is lost."""
    for (why, rx), (prefixes, whole) in zip(SECRET_CONTENT, _LITERALS, strict=True):
        if prefixes or whole:
            maybe = any(w in words for w in prefixes) or any(w in words for w in whole)
        else:
            maybe = _AWS_SECRET in words.lower() or (
                not ascii_only and any(c in text for c in _FOLDS_TO_ASCII)
            )
        if maybe and rx.search(text):
            return why
    return None


def unsafe_rel(rel: str) -> bool:
    """A listed path that does not name a file strictly beneath the root (a hostile index can
    hold `../x`; git itself would refuse to check it out)."""
    return (
        not rel
        or rel.startswith("/")
        or "\0" in rel
        or any(p in ("", ".", "..", ".git") for p in rel.split("/"))
    )


class Refused(Exception):
    """Not read; the message is the reason reported for the file."""


def read_beneath(root: Path, rel: str, max_bytes: int) -> bytes:
    """The bytes of root/rel, opened component by component without following a symlink (a
    final-component symlink is the caller's to resolve), only a regular file with one link,
    at most `max_bytes`. Refused(reason) otherwise; FileNotFoundError when it is gone."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    parts = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                nfd = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink (or a file) on the way
                    raise Refused("path goes through a symlink") from None
                raise
            os.close(fd)
            fd = nfd
        try:
            ffd = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)  # a FIFO never blocks
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise Refused("symlink") from None
            raise
    finally:
        os.close(fd)
    return _read_checked(ffd, max_bytes)


def _read_checked(ffd: int, max_bytes: int) -> bytes:
    """The bytes of an open file that is regular, has one link and is at most max_bytes."""
    with os.fdopen(ffd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise Refused("not a regular file")
        if st.st_nlink > 1:
            raise Refused("hard link (the file has other names)")
        if st.st_size > max_bytes:
            raise Refused(f"too large ({st.st_size} bytes)")
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise Refused(f"too large (more than {max_bytes} bytes)")
    return data


class BeneathReader:
    """read_beneath for many paths, best in sorted order: the directories on the way stay open
    from one file to the next (each opened with O_NOFOLLOW from its parent, as read_beneath
    does), so 30,000 files do not cost 150,000 opens. close() when done."""

    def __init__(self, root: Path) -> None:
        self._root = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._chain: list[tuple[str, int]] = []  # the open directories below the root

    def close(self) -> None:
        for _, fd in self._chain:
            os.close(fd)
        self._chain = []
        os.close(self._root)

    def _dir(self, parts: list[str]) -> int:
        n = 0
        while n < len(self._chain) and n < len(parts) and self._chain[n][0] == parts[n]:
            n += 1
        for _, fd in self._chain[n:]:
            os.close(fd)
        del self._chain[n:]
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_DIRECTORY
        for part in parts[n:]:
            parent = self._chain[-1][1] if self._chain else self._root
            try:
                fd = os.open(part, flags, dir_fd=parent)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused("path goes through a symlink") from None
                raise
            self._chain.append((part, fd))
        return self._chain[-1][1] if self._chain else self._root

    def stat(self, rel: str) -> os.stat_result:
        """The lstat of root/rel, reached through the same directory chain as read() (so a
        symlinked directory on the way is Refused): what a warm start compares with the last
        run's before trusting that run's hash of the file."""
        parts = rel.split("/")
        return os.stat(parts[-1], dir_fd=self._dir(parts[:-1]), follow_symlinks=False)

    def read(self, rel: str, max_bytes: int) -> bytes:
        """As read_beneath(root, rel, max_bytes)."""
        parts = rel.split("/")
        where = self._dir(parts[:-1])
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            ffd = os.open(parts[-1], flags, dir_fd=where)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise Refused("symlink") from None
            raise
        return _read_checked(ffd, max_bytes)


def workspace_refusal(cwd: Path, home: Path | None = None) -> str | None:
    """Why a session must not start in `cwd` without --allow-home (None: fine)."""
    where = Path(os.path.realpath(cwd))
    if home is None:
        home = Path(os.environ.get("HOME") or Path.home())
    home = Path(os.path.realpath(home))
    if where == Path("/"):
        what = "the root directory"
    elif where == home:
        what = "your home directory"
    elif where in home.parents:
        what = f"a directory holding your home directory ({home})"
    else:
        return None
    return (
        f"refusing to start in {where}: it is {what}, and the whole of it would become the "
        "workspace; start in a project directory, or pass --allow-home to insist"
    )
