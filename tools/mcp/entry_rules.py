"""What a server entry may ask for, and what trusting it covers.

A project `.mcp.json` comes with the repository, so its entries are the repository's words:
- variables that change how a program is loaded or starts up (the dynamic loader's `LD_*`,
  glibc's `GCONV_PATH`/`GLIBC_TUNABLES`, interpreters' start-up hooks such as `PYTHONPATH`,
  `NODE_OPTIONS`, `PERL5OPT`, `BASH_ENV`) are refused: they turn "start this server" into
  "run this library or file first", in whatever reads them;
- `${VAR}` expansion is refused: it would copy the user's environment (a token) into a
  command line, variable, URL or header that the repository chose.
Wherever an entry comes from, its variables take effect only inside the sandbox (the launcher
applies them just before it runs the server: tools/mcp/launch.py), never in the host-side
helpers that build the sandbox.

The fingerprint covers every field that changes what runs or what it can reach, so a changed
field (a new `"network": true`, a new header) needs trust again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # any dataclass: McpServerConfig (config.py, which imports this module)
    from _typeshed import DataclassInstance

# Prefixes: every variable of the family is read by the loader or the libc at start-up.
_LOADER_PREFIXES = ("LD_", "DYLD_", "BASH_FUNC_")
# Names: loader/libc start-up, then interpreters' and shells' start-up hooks (each makes the
# program load a module, file or option string before its own code).
_LOADER_NAMES = frozenset(
    {
        "GCONV_PATH",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCPATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "MALLOC_CHECK_",
        "MALLOC_PERTURB_",
        "PYTHONPATH",
        "PYTHONHOME",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONPLATLIBDIR",
        "PYTHONEXECUTABLE",
        "PYTHONWARNINGS",  # a warning category is imported: code runs
        "PYTHONBREAKPOINT",
        "PYTHONINSPECT",
        "NODE_OPTIONS",
        "NODE_PATH",
        "PERL5LIB",
        "PERLLIB",
        "PERL5OPT",
        "PERL5DB",
        "RUBYLIB",
        "RUBYOPT",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "CLASSPATH",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "PROMPT_COMMAND",
        "IFS",
    }
)
_EXPANSION = re.compile(r"\$\{[^}]*\}")


def loader_variable(name: str) -> bool:
    """True for a variable that changes how programs load or start (refused from a project)."""
    return name in _LOADER_NAMES or name.startswith(_LOADER_PREFIXES)


def refuse_loader_variables(server: str, names: Iterable[str]) -> None:
    bad = sorted(n for n in names if loader_variable(n))
    if bad:
        raise ValueError(
            f"MCP server {server!r}: env {', '.join(bad)} changes how programs are loaded; "
            "a project's .mcp.json may not set it (define the server in your own config)"
        )


def refuse_expansion(server: str, entry: object, path: str = "") -> None:
    """A project entry may not copy the user's environment anywhere (`${VAR}`)."""
    if isinstance(entry, str):
        m = _EXPANSION.search(entry)
        if m:
            raise ValueError(
                f"MCP server {server!r}: {path or 'a value'} expands {m.group(0)} from your "
                "environment; a project's .mcp.json may not read it (put the server in your "
                "own config or pass the value with `m3agent mcp add`)"
            )
    elif isinstance(entry, dict):
        for k, v in entry.items():
            refuse_expansion(server, str(k), f"{path}.{k}".lstrip(".") or "a key")
            refuse_expansion(server, v, f"{path}.{k}".lstrip("."))
    elif isinstance(entry, list):
        for i, v in enumerate(entry):
            refuse_expansion(server, v, f"{path}[{i}]")


# Not part of what runs: the entry's own name (the key trust is stored under), where it was
# read from, and the scope (what decides whether trust is needed at all).
_NOT_COVERED = frozenset({"name", "scope", "source"})


def fingerprint(cfg: DataclassInstance) -> str:
    """Over every other field of the dataclass, so a field added later is covered too."""
    what = {
        f.name: _plain(getattr(cfg, f.name))
        for f in dataclasses.fields(cfg)
        if f.name not in _NOT_COVERED
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def _plain(v: object) -> object:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if hasattr(v, "value"):  # a StrEnum
        return v.value
    return v


def trust_lines(cfg: DataclassInstance) -> list[str]:
    """What `m3agent mcp trust` shows: every covered field, values in full (a project
    entry's values are the repository's, not the user's secrets)."""
    rows = []
    for f in dataclasses.fields(cfg):
        if f.name in _NOT_COVERED:
            continue
        v = getattr(cfg, f.name)
        if f.name in ("env", "headers"):
            shown = ", ".join(f"{k}={val}" for k, val in v) or "(none)"
        elif isinstance(v, tuple):
            shown = " ".join(json.dumps(x) for x in v) or "(none)"
        else:
            shown = json.dumps(_plain(v))
        rows.append(f"  {f.name}: {shown}")
    return rows
