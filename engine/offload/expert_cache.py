"""The on-disk cache of converted experts: built once, memory-mapped on every later start.

Layout: `<cache_dir>/<fingerprint[:20]>-<form>[-g<group>]/layer_NNN.bin` (the tensors of one
layer, each page-aligned, in the form's kernel layout) and `layer_NNN.json` (the table of
tensors, the file's size, a sampled checksum). A layer is converted into a temporary file,
fsynced and renamed, and only then is its JSON written the same way: a JSON that parses and
agrees with its file's size and checksum marks a finished layer; anything else (no JSON, a
torn or foreign one, a truncated or overwritten .bin) is converted again, never trusted.

Opening maps each file read-only-shared (copy-on-write, never written), so the page cache
holds the experts: a second start costs page-table setup, and a host with less RAM than the
experts still runs, reading from disk what the cache has evicted. The checksum samples the
file (its ends and 64 KiB every 256 MiB), so verifying 220 GB costs milliseconds; it catches
truncation and torn writes, not a flipped bit in the middle of a page (that is the disk's job).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from . import forms
from .cpu_experts import HostExpertLayer, pack_expert, pack_mxfp8_expert, pack_mxfp8_expert_int8
from .expert_source import LayerExperts
from .forms import INT4_GROUP
from .plan import ExpertForm

VERSION = 2
ALIGN = 4096  # each tensor starts on its own page: pinning one never touches another's page
_NAMES = ("w13", "w2", "s13", "s2", "m13", "m2")


@dataclass(frozen=True, slots=True)
class BuildProgress:
    layers_done: int
    layers_total: int
    bytes_written: int
    elapsed_s: float
    layer: int


def stderr_progress(p: BuildProgress) -> None:
    print(
        f"m3agent: converting experts: layer {p.layers_done}/{p.layers_total} "
        f"({p.bytes_written / 1e9:.1f} GB, {p.elapsed_s:.0f} s)",
        file=sys.stderr,
        flush=True,
    )


def sampled_checksum(path: Path, size: int) -> str:
    h = hashlib.blake2b(digest_size=16)
    step, span = 256 << 20, 64 << 10
    with path.open("rb") as f:
        offsets = sorted({0, max(0, size - (1 << 20)), *range(0, size, step)})
        for off in offsets:
            f.seek(off)
            h.update(f.read(1 << 20 if off in (0, max(0, size - (1 << 20))) else span))
    h.update(size.to_bytes(8, "little"))
    return h.hexdigest()


def _write_durable(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write through a temporary file, fsync, rename: the name holds a whole file or none."""
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk or a kill keeps no half-written layer
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class ExpertStore:
    """Converted experts of one checkpoint in one form, under one cache directory."""

    def __init__(
        self, cache_dir: Path, fingerprint: str, form: ExpertForm, group: int = INT4_GROUP
    ) -> None:
        if form not in (ExpertForm.INT8, ExpertForm.INT4, ExpertForm.MXFP8, ExpertForm.BF16):
            raise ValueError(f"no cached host form {form}")
        tag = f"-g{group}" if form is ExpertForm.INT4 else ""
        self.dir = Path(cache_dir) / f"{fingerprint[:20]}-{form.value}{tag}"
        self.fingerprint, self.form, self.group = fingerprint, form, group

    @classmethod
    def open(
        cls,
        cache_dir: Path,
        fingerprint: str,
        form: ExpertForm,
        layers: Sequence[int],
        source: Callable[[int], LayerExperts],
        *,
        group: int = INT4_GROUP,
        progress: Callable[[BuildProgress], None] | None = stderr_progress,
    ) -> dict[int, HostExpertLayer]:
        """Every layer memory-mapped from the cache, converting (with progress) the missing."""
        store = cls(cache_dir, fingerprint, form, group)
        return store.load(layers, source, progress)

    def _paths(self, layer: int) -> tuple[Path, Path]:
        return self.dir / f"layer_{layer:03d}.bin", self.dir / f"layer_{layer:03d}.json"

    def valid(self, layer: int) -> dict[str, Any] | None:
        """The layer's table when its files are whole and ours, else None."""
        bin_p, meta_p = self._paths(layer)
        try:
            meta: dict[str, Any] = json.loads(meta_p.read_text())
            size = bin_p.stat().st_size
        except (OSError, ValueError):
            return None
        want = (VERSION, self.fingerprint, self.form.value, self.group, layer)
        have = tuple(meta.get(k) for k in ("version", "fingerprint", "form", "group", "layer"))
        if have != want or meta.get("size") != size:
            return None
        if meta.get("checksum") != sampled_checksum(bin_p, size):
            return None
        return meta

    def load(
        self,
        layers: Sequence[int],
        source: Callable[[int], LayerExperts],
        progress: Callable[[BuildProgress], None] | None = stderr_progress,
    ) -> dict[int, HostExpertLayer]:
        self.dir.mkdir(parents=True, exist_ok=True)
        metas = {layer: self.valid(layer) for layer in layers}
        todo = [layer for layer in layers if metas[layer] is None]
        first = source(todo[0]) if todo else None
        if first is not None:
            self._check_room(len(todo), first)
        t0, written = time.perf_counter(), 0
        for i, layer in enumerate(todo):
            experts = first if i == 0 and first is not None else source(layer)
            meta = metas[layer] = self.convert(layer, experts)
            written += meta["size"]
            if progress is not None:
                progress(BuildProgress(i + 1, len(todo), written, time.perf_counter() - t0, layer))
        return {layer: self.mapped(layer, m) for layer, m in metas.items() if m is not None}

    def _check_room(self, layers: int, experts: LayerExperts) -> None:
        """ValueError before converting when the cache's disk cannot hold the layers to write."""
        gate = experts.read(0)[0]
        inter, hidden = (gate[0] if isinstance(gate, tuple) else gate).shape
        per_weight = forms.bytes_per_weight(self.form.value, self.group)
        need = int(layers * experts.count * 3 * inter * hidden * per_weight)
        free = shutil.disk_usage(self.dir).free
        if need > free:
            raise ValueError(
                f"the expert cache needs {need / 1e9:.1f} GB for {layers} layer(s) at "
                f"{self.dir.parent}, and {free / 1e9:.1f} GB are free: free space there or "
                "choose a smaller --expert-form (int4)"
            )

    def convert(self, layer: int, experts: LayerExperts) -> dict[str, Any]:
        """Quantise/re-tile one layer expert by expert into its file, durably; returns its
        table. Peak memory: one expert in fp32, not the layer."""

        def packed(e: int) -> dict[str, torch.Tensor]:
            g, u, d = experts.read(e)
            if experts.mx and self.form is ExpertForm.MXFP8:
                p13, p2 = pack_mxfp8_expert(g, u, d)
            elif experts.mx and self.form is ExpertForm.INT8:  # the released default's path
                p13, p2 = pack_mxfp8_expert_int8(g, u, d)
            else:
                p13, p2 = pack_expert(
                    self.form, _as_float(g), _as_float(u), _as_float(d), self.group
                )
            return {n + "13": t for n, t in p13.items()} | {n + "2": t for n, t in p2.items()}

        first = packed(0)
        table: list[dict[str, Any]] = []
        off = 0
        for name in _NAMES:
            if name in first:
                t = first[name]
                n = t.numel() * t.element_size()  # one expert's bytes
                table.append({"name": name, "dtype": str(t.dtype).removeprefix("torch."),
                              "shape": [experts.count, *t.shape], "offset": off,
                              "nbytes": n * experts.count})  # fmt: skip
                off = -(-(off + n * experts.count) // ALIGN) * ALIGN
        bin_p, meta_p = self._paths(layer)

        def write_bin(f: BinaryIO) -> None:
            f.truncate(off)
            for e in range(experts.count):
                p = first if e == 0 else packed(e)
                for entry in table:
                    t = p[entry["name"]].contiguous()
                    n = entry["nbytes"] // experts.count
                    f.seek(entry["offset"] + e * n)
                    f.write(t.reshape(-1).view(torch.uint8).numpy().data)

        _write_durable(bin_p, write_bin)
        hidden = first["w13"].shape[1] * forms.CHUNK[self.form.value]
        meta = {
            "version": VERSION,
            "fingerprint": self.fingerprint,
            "form": self.form.value,
            "group": self.group,
            "layer": layer,
            "hidden": hidden,
            "inter": first["w13"].shape[0] * forms.TILE // 2,
            "size": off,
            "checksum": sampled_checksum(bin_p, off),
            "tensors": table,
        }
        _write_durable(meta_p, lambda f: f.write(json.dumps(meta).encode()))
        return meta

    def mapped(self, layer: int, meta: dict[str, Any]) -> HostExpertLayer:
        """The layer as views of a private read-only mapping of its file."""
        bin_p, _ = self._paths(layer)
        mm = np.memmap(bin_p, dtype=np.uint8, mode="c", shape=(meta["size"],))
        views = {}
        for e in meta["tensors"]:
            raw = torch.from_numpy(mm[e["offset"] : e["offset"] + e["nbytes"]])
            views[e["name"]] = raw.view(getattr(torch, e["dtype"])).reshape(e["shape"])
        return HostExpertLayer(self.form, meta["hidden"], meta["inter"], group=self.group, **views)


def _as_float(w: object) -> torch.Tensor:
    if isinstance(w, tuple):  # MXFP8 pair converted into another form
        from ..native.loaders.fp8 import dequantize_mxfp8

        return dequantize_mxfp8(*w)
    assert isinstance(w, torch.Tensor)
    return w.float()
