"""One line for a missing optional package (torch, triton, gguf, vllm) instead of a traceback.

The README's one-command install has no torch: every command that needs the native engine
must say which extra to install, in the same words everywhere (the CLI's last-resort handler,
the factory, the first-run screen).
"""

from __future__ import annotations

import importlib.util

# The optional packages and the install line that brings each one.
EXTRAS = {
    "torch": "pip install -e '.[native]' (CPU only: pip install torch --index-url "
    "https://download.pytorch.org/whl/cpu first)",
    "triton": "pip install -e '.[native]' (Linux x86_64 with CUDA)",
    "gguf": "pip install -e '.[native]'",
    "vllm": "pip install -e '.[native,vllm]'",
}


def missing_extra(e: BaseException) -> str | None:
    """The one-line message for an ImportError of an optional package, else None."""
    if not isinstance(e, ImportError):
        return None
    name = (getattr(e, "name", None) or "").split(".")[0]
    if name not in EXTRAS:
        return None
    return needs_line(name)


def needs_line(name: str) -> str:
    """The one line for the optional package `name` (a key of EXTRAS)."""
    return f"this needs {name}, which is not installed here: {EXTRAS[name]}"


def package_installed(name: str) -> bool:
    """Found, not imported (importing torch takes seconds)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a broken or shadowed install counts as missing
        return False


def torch_installed() -> bool:
    return package_installed("torch")
