"""`--model`: a local checkpoint directory (or .gguf file) or a hub repo id.

A spec is a local path only when it is written as one: `./x`, `../x`, `/x`, `~/x` (or `.`).
Any other spec is a name, looked up in the user's model directories (`<data home>/models`,
passed in by the app) and then, when it has the `owner/name` shape, in the hub. A name is never
looked up in the working directory: a repository that commits `MiniMaxAI/MiniMax-M3/` with its
own chat template and tokenizer must not become the model when the agent runs from its root.

A repo id is resolved through huggingface_hub's cache: a cached snapshot is used as it is
(nothing is fetched), else it is downloaded with huggingface_hub's own progress bars. Offline
(HF_HUB_OFFLINE or no network) an uncached repo is one clear line. Every checkpoint is
checked before any engine loads it: config.json, and every weight shard that the index names,
so that a wrong or half-downloaded checkpoint is named in the error, not in a stack trace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .api import EngineUnavailable
from .json_file import read_json_object

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
M3_ARCHITECTURES = (
    "MiniMaxM3SparseForConditionalGeneration",
    "MiniMaxM3SparseForCausalLM",
)


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    path: Path  # a local directory or .gguf file
    repo_id: str | None = None  # set when --model was a hub repo id

    @property
    def key(self) -> str:
        """What identifies this model to `serve` locks: the resolved local path."""
        return str(self.path.resolve())


@dataclass(frozen=True, slots=True)
class CheckpointFacts:
    """What the vLLM backend sizes its parallelism from."""

    architectures: tuple[str, ...]
    weight_bytes: int
    quantization: str | None  # "fp8", "mxfp8", ... or None for BF16
    num_key_value_heads: int
    max_position_embeddings: int
    rope_scaling: dict[str, Any] | None
    has_vision: bool
    num_experts: int = 1

    @property
    def is_fp8(self) -> bool:
        return self.quantization is not None and "fp8" in self.quantization


def looks_like_repo_id(spec: str) -> bool:
    return bool(_REPO_ID.match(spec)) and not spec.startswith((".", "/", "~"))


def written_as_path(spec: str) -> bool:
    return spec in (".", "..", "~") or spec.startswith(("./", "../", "/", "~/"))


def _in_model_dirs(spec: str, model_dirs: tuple[Path, ...]) -> Path | None:
    """`<dir>/<spec>` for the first model dir holding it, never a path that climbs out."""
    for d in model_dirs:
        root = Path(d).expanduser().resolve()
        candidate = (root / spec).resolve()
        if candidate.is_relative_to(root) and candidate != root and candidate.exists():
            return candidate
    return None


def resolve_model(
    spec: str,
    *,
    local_only: bool = False,
    check: bool = True,
    model_dirs: tuple[Path, ...] = (),
) -> ResolvedModel:
    """A local path or a model name -> a checked local checkpoint; EngineUnavailable otherwise.

    local_only: never touch the network (used when looking for a running server);
    model_dirs: the user's own model directories, searched for a name before the hub."""
    if not spec or not spec.strip():
        raise ValueError("--model is empty")
    repo_id = spec if looks_like_repo_id(spec) else None
    if written_as_path(spec):
        path = Path(spec).expanduser()
        if not path.exists():
            raise EngineUnavailable(f"model directory {path} does not exist")
        resolved = ResolvedModel(path.resolve())
    elif (mine := _in_model_dirs(spec, model_dirs)) is not None:
        resolved = ResolvedModel(mine, repo_id=repo_id)
    elif repo_id is not None:
        resolved = ResolvedModel(_from_hub(spec, local_only), repo_id=repo_id)
    else:
        where = ", ".join(str(d) for d in model_dirs) or "no model directory"
        raise EngineUnavailable(
            f"model {spec!r} is neither a hub repo id nor in {where}; "
            f"write ./{spec} (or an absolute path) for a local directory"
        )
    if check:
        check_checkpoint(resolved.path)
    return resolved


def _from_hub(repo_id: str, local_only: bool) -> Path:
    try:
        import huggingface_hub as hf
        from huggingface_hub.utils import HfHubHTTPError
    except ImportError:
        raise EngineUnavailable(
            f"{repo_id} looks like a hub repo id, but huggingface_hub is not installed "
            f"(pip install huggingface_hub), or pass a local directory"
        ) from None
    try:
        return Path(hf.snapshot_download(repo_id, local_files_only=True))
    except Exception:  # not (fully) cached: fall through to a download
        pass
    if local_only:
        raise EngineUnavailable(f"{repo_id} is not in the local hub cache")
    offline = hf.constants.HF_HUB_OFFLINE
    if offline:
        raise EngineUnavailable(
            f"{repo_id} is not in the hub cache and HF_HUB_OFFLINE is set; download it "
            f"where there is network (huggingface-cli download {repo_id}) or pass a local directory"
        )
    try:
        # huggingface_hub draws its own progress bars on stderr while it downloads.
        return Path(hf.snapshot_download(repo_id))
    except hf.errors.RepositoryNotFoundError:
        raise EngineUnavailable(
            f"no model {repo_id} on the hub (or it is private: set HF_TOKEN)"
        ) from None
    except hf.errors.GatedRepoError:
        raise EngineUnavailable(f"{repo_id} is gated: accept its terms and set HF_TOKEN") from None
    except (HfHubHTTPError, OSError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise EngineUnavailable(
            f"cannot download {repo_id} (offline or the hub is unreachable: {first}); "
            f"pass a local directory or retry with network"
        ) from None
    except Exception as e:  # connection errors come in many classes across versions
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise EngineUnavailable(f"cannot download {repo_id}: {first}") from None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise EngineUnavailable(f"checkpoint {path.parent} has no {path.name}")
    try:
        return read_json_object(path)
    except ValueError as e:
        raise EngineUnavailable(f"checkpoint: {e}") from None


def weight_files(path: Path) -> list[Path]:
    """The shard files of a checkpoint; EngineUnavailable naming what is missing."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise EngineUnavailable(f"checkpoint {path}: {index.name} has no weight_map")
        names = sorted(set(weight_map.values()))
        missing = [n for n in names if not (path / n).is_file()]
        if missing:
            shown = ", ".join(missing[:3]) + (
                f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            )
            raise EngineUnavailable(
                f"checkpoint {path} is incomplete: {len(missing)} of {len(names)} weight "
                f"shards missing ({shown}); finish the download"
            )
        return [path / n for n in names]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise EngineUnavailable(f"checkpoint {path} has no *.safetensors weights")
    return files


def check_checkpoint(path: Path) -> None:
    """Enough to fail early and clearly; the loaders check shapes and dtypes themselves."""
    if path.is_file():
        if path.suffix != ".gguf":
            raise EngineUnavailable(f"{path} is a file but not a .gguf checkpoint")
        return
    if not (path / "config.json").is_file() and any(path.glob("*.gguf")):
        return  # a directory holding one GGUF file (native engine)
    _read_json(path / "config.json")
    weight_files(path)


def checkpoint_facts(path: Path) -> CheckpointFacts:
    cfg = _read_json(path / "config.json")
    nested = cfg.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else cfg
    quant = cfg.get("quantization_config") or text.get("quantization_config") or {}
    method = quant.get("quant_method") or quant.get("format") if isinstance(quant, dict) else None
    if method is None and str(cfg.get("torch_dtype", "")).startswith("float8"):
        method = "fp8"
    size = sum(f.stat().st_size for f in weight_files(path))
    return CheckpointFacts(
        architectures=tuple(cfg.get("architectures") or ()),
        weight_bytes=size,
        quantization=str(method).lower() if method else None,
        num_key_value_heads=int(text.get("num_key_value_heads", 4)),
        max_position_embeddings=int(text.get("max_position_embeddings", 524_288)),
        rope_scaling=text.get("rope_scaling"),
        has_vision=isinstance(cfg.get("vision_config"), dict),
        num_experts=int(text.get("num_local_experts", 1)),
    )
