"""A safetensors file's JSON header (names, dtypes, shapes, offsets) without its tensors.

Torch-free, so `model info` and `model plan` read checkpoints where torch is absent.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any


def read_header(f: Path) -> dict[str, Any]:
    """Tensor name -> {"dtype", "shape", "data_offsets"}; ValueError naming the file if corrupt."""
    try:
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            if n > 100_000_000:
                raise ValueError("header length is implausible")
            header: dict[str, Any] = json.loads(fh.read(n))
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"corrupt safetensors file {f}: {e}") from None
    header.pop("__metadata__", None)
    return header


# safetensors' dtype names of the tensors a checkpoint writer emits, and their sizes in bytes
DTYPE_BYTES = {"F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "U8": 1, "I8": 1, "I32": 4}


def write_streamed(
    path: Path,
    layout: list[tuple[str, str, tuple[int, ...]]],
    produce: Any,
    metadata: dict[str, str] | None = None,
) -> int:
    """Write a safetensors file tensor by tensor, holding one tensor in memory at a time.

    `layout` lists (name, safetensors dtype, shape) in file order; `produce(name)` returns that
    tensor's bytes (any buffer: bytes, memoryview, a numpy array). The header is written first
    from the layout, so each tensor is checked against its declared size as it arrives. Written
    to a temporary name, fsynced, then renamed: a killed writer leaves no file that looks whole.
    Returns the file's size.
    """
    offsets: dict[str, Any] = {"__metadata__": metadata or {"format": "pt"}}
    pos = 0
    for name, dtype, shape in layout:
        n = DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        offsets[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + n]}
        pos += n
    header = json.dumps(offsets, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)  # the data starts 8-byte aligned
    tmp = path.with_name(path.name + ".partial")
    with tmp.open("wb") as fh:
        fh.write(struct.pack("<Q", len(header)))
        fh.write(header)
        for name, _dtype, _shape in layout:
            start, end = offsets[name]["data_offsets"]
            buf = memoryview(produce(name)).cast("B")
            if len(buf) != end - start:
                raise ValueError(f"{name}: {len(buf)} bytes produced, {end - start} declared")
            fh.write(buf)
        fh.flush()
        os.fsync(fh.fileno())
    tmp.rename(path)
    return 8 + len(header) + pos
