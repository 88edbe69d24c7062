"""Length-prefixed marshal frames: how scan_pool.py talks to its scan_worker.py processes."""

from __future__ import annotations

import marshal
import struct
from typing import IO, Any

_LEN = struct.Struct("<Q")


def write_frame(out: IO[bytes], obj: Any) -> None:
    data = marshal.dumps(obj)
    out.write(_LEN.pack(len(data)) + data)
    out.flush()


def read_frame(src: IO[bytes]) -> Any:
    """What the other side wrote (marshal gives Any): the caller checks its shape."""
    head = src.read(_LEN.size)
    if len(head) < _LEN.size:
        raise EOFError
    (n,) = _LEN.unpack(head)
    data = src.read(n)
    if len(data) < n:
        raise EOFError
    return marshal.loads(data)
