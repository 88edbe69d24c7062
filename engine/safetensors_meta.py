"""A safetensors file's JSON header (names, dtypes, shapes, offsets) without its tensors.

Torch-free, so `model info` and `model plan` read checkpoints where torch is absent.
"""

from __future__ import annotations

import json
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
