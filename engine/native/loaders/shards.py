"""A checkpoint directory's safetensors files (one, or those an index json lists) and their
tensors, read one at a time: what the model loader (checkpoint.py) and the routed-expert
reader of the offload path (engine/offload/expert_source.py) both read a checkpoint with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...json_file import read_json_object as _read_json


def safetensors_files(d: Path) -> list[Path]:
    """The files the index json names, else every *.safetensors of `d`; ValueError naming
    what is missing."""
    index = d / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(_read_json(index).get("weight_map", {}).values()))
        if not names:
            raise ValueError(f"{index} has an empty weight_map")
        files = [d / n for n in names]
        for f in files:
            if not f.exists():
                raise ValueError(f"safetensors file {f.name} listed in {index.name} is missing")
        return files
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ValueError(f"no *.safetensors file in {d}")
    return files


def iter_tensors(files: list[Path]) -> Iterator[tuple[str, Any, Path]]:
    """(name, lazy slice handle opener, file): tensors are read one at a time."""
    from safetensors import safe_open

    for f in files:
        try:
            handle = safe_open(str(f), framework="pt")
            keys = list(handle.keys())
        except Exception as e:  # SafetensorError / OSError: truncated or not safetensors
            raise ValueError(f"corrupt safetensors file {f}: {e}") from None
        for k in keys:
            yield k, handle, f
