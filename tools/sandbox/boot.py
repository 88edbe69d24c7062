"""How the launcher is started, independent of how m3agent was installed.

`python -m m3agent.tools.sandbox.launch` depends on the install's import machinery: an
editable install maps `m3agent.tools` to a source tree through a finder in site-packages,
and that tree (a clone under /tmp or $HOME) is hidden inside bubblewrap. So the launcher is
started as `python -I -S -c BOOTSTRAP PKG_DIR ...`: the interpreter in isolated mode, no site
packages at all, and this package loaded by file path. It needs only the interpreter, its
standard library and this one directory, which `needed_paths` names so bubblewrap can bind
them read-only when they lie in a hidden tree.

So the modules of this package import each other by their absolute `m3agent.tools.sandbox.*`
names, not relatively: the launcher's bootstrap registers only this package, by path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PKG_DIR = Path(__file__).resolve().parent

# Registers m3agent.tools.sandbox from PKG_DIR (argv[1]) without importing anything else.
BOOTSTRAP = """\
import importlib.util, sys, types
pkg = sys.argv.pop(1)
for name in ("m3agent", "m3agent.tools"):
    ns = types.ModuleType(name)
    ns.__path__ = []
    sys.modules[name] = ns
spec = importlib.util.spec_from_file_location(
    "m3agent.tools.sandbox", pkg + "/__init__.py", submodule_search_locations=[pkg])
mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mod
spec.loader.exec_module(mod)
from m3agent.tools.sandbox.launch import main
sys.exit(main(sys.argv[1:]))
"""


def interpreter() -> str:
    """The real interpreter behind a venv's `python` link (the venv itself is not needed)."""
    return os.path.realpath(sys.executable)


def launcher_argv(spec_json: str, command: list[str]) -> list[str]:
    return [
        interpreter(),
        "-I",
        "-S",
        "-B",
        "-c",
        BOOTSTRAP,
        str(PKG_DIR),
        spec_json,
        "--",
        *command,
    ]


def needed_paths() -> tuple[Path, ...]:
    """What the launcher reads: the interpreter's prefix (stdlib, libpython) and this package;
    and the agent's own environment (a venv under /tmp or $HOME), whose `python` runs MCP
    servers and the commands that name `sys.executable`."""
    exe = Path(interpreter())
    return tuple(
        dict.fromkeys([Path(sys.base_prefix).resolve(), exe.parent, PKG_DIR, Path(sys.prefix)])
    )


def inside_roots(policy) -> tuple[Path, ...]:
    """The launcher's package when it lies in a writable root (m3agent run on its own source
    tree): it runs before any confinement, so a command must never be able to change it."""
    return tuple(
        PKG_DIR for root in policy.writable_roots() if root == PKG_DIR or root in PKG_DIR.parents
    )[:1]
