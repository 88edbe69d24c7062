"""The environment a command sees: an allow-list, not a deny-list.

A deny-list of credential-looking names always misses some (DATABASE_URL, MYSQL_PWD,
CI_JOB_JWT, SLACK_WEBHOOK_URL...), so only names known to be needed pass: the shell basics,
locale, terminal, and the variables toolchains use to find themselves. Anything else the
user wants passed is named in the policy (`SandboxPolicy.env_allow`).
"""

from __future__ import annotations

import re

ALLOWED = frozenset(
    {
        # shell and user
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "PWD",
        "SHLVL",
        "HOSTNAME",
        "TMPDIR",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "COLORTERM",
        "NO_COLOR",
        "FORCE_COLOR",
        "CLICOLOR",
        "COLUMNS",
        "LINES",
        "EDITOR",
        "VISUAL",
        "PAGER",
        "LESS",
        "MANPATH",
        "CI",
        "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        # build tools and toolchains
        "CC",
        "CXX",
        "CFLAGS",
        "CXXFLAGS",
        "CPPFLAGS",
        "LDFLAGS",
        "MAKEFLAGS",
        "PKG_CONFIG_PATH",
        "LD_LIBRARY_PATH",
        "LIBRARY_PATH",
        "CPATH",
        "CMAKE_PREFIX_PATH",
        "CARGO_HOME",
        "RUSTUP_HOME",
        "RUSTUP_TOOLCHAIN",
        "RUSTFLAGS",
        "CARGO_TARGET_DIR",
        "GOPATH",
        "GOROOT",
        "GOCACHE",
        "GOMODCACHE",
        "GOFLAGS",
        "GO111MODULE",
        "GOTOOLCHAIN",
        "JAVA_HOME",
        "NVM_DIR",
        "NVM_BIN",
        "NODE_PATH",
        "NODE_OPTIONS",
        "PYENV_ROOT",
        "PYENV_VERSION",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "CONDA_DEFAULT_ENV",
        "PYTHONPATH",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
        "PYTHONIOENCODING",
        "PYTHONHASHSEED",
        "PYTHONUTF8",
    }
)
_ALLOWED_PREFIXES = ("LC_",)
# Even an allowed name never carries these (a user-set NODE_OPTIONS with --require of a
# token file is still theirs to pass; this only guards the built-in list).
_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PWD_|CREDENTIAL|AUTH|JWT)")


def is_allowed(name: str, extra: frozenset[str] = frozenset()) -> bool:
    if name in extra:
        return True  # named by the user: passed as is
    if _SECRET.search(name.upper()) and name != "PWD":
        return False
    return name in ALLOWED or name.startswith(_ALLOWED_PREFIXES)


def scrub(env: dict[str, str], extra: tuple[str, ...] = ()) -> tuple[dict[str, str], list[str]]:
    """(the environment to pass, the names withheld)."""
    allow = frozenset(extra)
    kept = {k: v for k, v in env.items() if is_allowed(k, allow)}
    return kept, sorted(k for k in env if k not in kept)
