"""The one way a command stops on bad input: `error: <one line>` on stderr, a documented code."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer

from .exit_codes import USAGE_ERROR
from .safe_text import visible


def die(message: str, code: int = USAGE_ERROR) -> NoReturn:
    sys.stderr.write(f"error: {visible(message)}\n")  # it may quote a file name
    raise typer.Exit(code)
