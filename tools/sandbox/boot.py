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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from m3agent.tools.sandbox.policy import SandboxPolicy

PKG_DIR = Path(__file__).resolve().parent

# Registers m3agent.tools.sandbox from PKG_DIR (argv[1]) without importing anything else:
# three bare module objects with a __path__ (the package's __init__ is empty), so the
# launcher's modules load through the ordinary path finder and their bytecode caches
# (importlib.util would cost more than the launcher's own work).
BOOTSTRAP = """\
import sys
pkg = sys.argv.pop(1)
Mod = type(sys)
for name, path in (("m3agent", []), ("m3agent.tools", []), ("m3agent.tools.sandbox", [pkg])):
    mod = Mod(name)
    mod.__path__ = path
    sys.modules[name] = mod
from m3agent.tools.sandbox.launch import main
sys.exit(main(sys.argv[1:]))
"""


def compile_launcher() -> None:
    """Write the bytecode caches of the modules the launcher loads. It runs with -B (a
    command must never get to write code the next launcher runs) and the host never imports
    them, so without this every command would compile them anew. Where the package is not
    writable (a wheel in a system prefix) the installer has compiled them already."""
    import py_compile

    for name in ("launch.py", "confine.py"):
        try:
            py_compile.compile(str(PKG_DIR / name), doraise=True)
        except (OSError, py_compile.PyCompileError):
            continue  # not writable here: the launcher then compiles in memory, slower


def interpreter() -> str:
    """The real interpreter behind a venv's `python` link (the venv itself is not needed)."""
    return os.path.realpath(sys.executable)


def launcher_argv(spec: str, command: list[str]) -> list[str]:
    """`spec`: the launcher's spec, marshal-ed and hex-encoded (runner.launch_argv)."""
    return [
        interpreter(),
        "-I",
        "-S",
        "-B",
        "-c",
        BOOTSTRAP,
        str(PKG_DIR),
        spec,
        "--",
        *command,
    ]


def _helper() -> tuple[Path, ...]:
    from m3agent.tools.sandbox import helper

    built = helper.path()
    return (built,) if built is not None else ()


def needed_paths() -> tuple[Path, ...]:
    """What the launcher reads: the interpreter's prefix (stdlib, libpython) and this package;
    and the agent's own environment (a venv under /tmp or $HOME), whose `python` runs MCP
    servers and the commands that name `sys.executable`; and the compiled helper."""
    exe = Path(interpreter())
    return tuple(
        dict.fromkeys(
            [Path(sys.base_prefix).resolve(), exe.parent, PKG_DIR, Path(sys.prefix), *_helper()]
        )
    )


def inside_roots(policy: SandboxPolicy) -> tuple[Path, ...]:
    """The launcher's package (and the helper), and the agent's own Python environment, where
    they lie in a writable root (m3agent run on its own source tree, or installed into the
    project's `.venv`): the first run before any confinement, the second is what the agent
    itself runs on the host at its next start (a `.pth` file in its site-packages, a
    replaced `bin/python`), so a command must never be able to change them."""
    return tuple(
        p
        for p in (PKG_DIR, *_helper(), *own_environment())
        if any(root == p or root in p.parents for root in policy.writable_roots())
    )


def own_environment() -> tuple[Path, ...]:
    """The agent's virtualenv (sys.prefix; none for a system interpreter)."""
    if sys.prefix == sys.base_prefix:
        return ()
    return (Path(sys.prefix).resolve(),)
