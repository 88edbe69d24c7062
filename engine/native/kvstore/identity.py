"""The identity a saved KV page is only valid for: the same weights, config, dtypes, cache layout,
block size, device kind and engine code. Two engines with equal identities compute the same K/V
for the same tokens; anything else would restore pages that produce other tokens.

The engine version is the package version plus a digest of the engine's own sources that compute
K/V (models, layers, kernels, loaders, runner): a development checkout that changes a kernel gets
a new identity without anybody remembering to bump a number.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

# The page file's own format (page_file.py); a change of layout bumps it.
PAGE_FORMAT_VERSION = 1
_KV_SOURCES = ("models", "layers", "kernels", "loaders", "runner", "core")


@functools.cache
def engine_version() -> str:
    """`<package version>+<digest of the native engine's sources>` (computed once)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        pkg = version("m3agent")
    except PackageNotFoundError:
        pkg = "0"
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for sub in _KV_SOURCES:
        for f in sorted((root / sub).rglob("*.py")):
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return f"{pkg}+{h.hexdigest()[:16]}"


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    weights: str  # checkpoint fingerprint: config.json and every safetensors header/size
    model_dtype: str
    cache_dtype: str
    block_size: int
    # per layer: (kv heads, head_dim, index_dim): the page's tensors and their shapes
    layout: tuple[tuple[int, int, int], ...]
    device: str  # "cpu" | "cuda": kernels differ, so does the last bit of K/V
    engine: str  # engine_version()
    name: str = ""  # the model's folder name, for `m3agent cache` (not part of the key)

    @property
    def key(self) -> str:
        """The hex digest naming this identity's folder; `name` is only a label."""
        fields = asdict(self)
        fields.pop("name")
        fields["format"] = PAGE_FORMAT_VERSION
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def describe(self) -> dict[str, object]:
        """What model.json records next to the pages (read by `m3agent cache`)."""
        return {**asdict(self), "format": PAGE_FORMAT_VERSION, "key": self.key}


def weights_fingerprint(model_dir: Path) -> str:
    """The checkpoint's fingerprint (offload's: headers and sizes, read in milliseconds)."""
    from ...offload.expert_source import checkpoint_fingerprint

    return checkpoint_fingerprint(model_dir)
