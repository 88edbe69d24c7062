"""A scan worker (scan_pool.py starts it): marshal frames of (rules, [(path, bytes)]) in on
stdin, the list of plain records out on stdout, until stdin closes."""

from __future__ import annotations

import sys
from typing import BinaryIO

from .frames import read_frame, write_frame


def serve(src: BinaryIO, out: BinaryIO) -> None:
    from .files import FileRules
    from .scan import records_of

    while True:
        try:
            rules_plain, items = read_frame(src)
        except EOFError:
            return
        extra, max_bytes, builtin, walk = rules_plain
        rules = FileRules(tuple(extra), max_bytes, builtin, walk)
        write_frame(out, records_of([(p, d) for p, d in items], rules))


if __name__ == "__main__":
    serve(sys.stdin.buffer, sys.stdout.buffer)
