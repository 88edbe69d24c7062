"""A scan worker (scan_pool.py starts it): marshal frames of (rules, [(path, bytes)]) in on
stdin, the list of plain records out on stdout, until stdin closes."""

from __future__ import annotations

import marshal
import struct
import sys
from typing import Any, BinaryIO

_LEN = struct.Struct("<Q")


def write_frame(out: Any, obj: Any) -> None:
    data = marshal.dumps(obj)
    out.write(_LEN.pack(len(data)) + data)
    out.flush()


def read_frame(src: Any) -> Any:
    head = src.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    (n,) = _LEN.unpack(head)
    data = src.read(n)
    if len(data) < n:
        raise EOFError
    return marshal.loads(data)


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
