"""The native engine in tests: tiny random checkpoints written on disk (CPU-sized, built in
seconds), and a NativeEngine that also records what it was asked and what it generated."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tiny_m3(path: Path, seed: int, **spec: Any) -> Path:
    """A random M3 at PATH: 2 layers, 128 wide, 2 attention heads over 1 KV head, 2 experts,
    a 512-token vocabulary; SPEC overrides other TinySpec fields."""
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    base = dict(layers=2, hidden=128, heads=2, kv_heads=1, experts=2, vocab=512)
    init_tiny(path, TinySpec(**{**base, **spec}, seed=seed))
    return path


def tiny_vl(path: Path) -> Path:
    """A random M3 VL at PATH: 2 layers (1 dense) and a random vision tower."""
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny
    from m3agent.engine.native.loaders.vision import write_random_vision_weights

    init_tiny(path, TinySpec(layers=2, dense_layers=1))
    write_random_vision_weights(path, seed=1)
    return path


def recording_engine(model_dir: Path, num_gpu_blocks: int) -> Any:
    """The real NativeEngine on MODEL_DIR; it also keeps each request (`requests`) and each
    finished request's generated token ids (`generated`, by request id): the benchmarks'
    recording engine (bench/session_common.py), so tests and benchmarks measure one thing."""
    from m3agent.engine.native.core.engine_config import EngineConfig

    from .bench import load_bench

    recording = load_bench("session_common").recording_engine_class()
    return recording.from_model_dir(model_dir, config=EngineConfig(num_gpu_blocks=num_gpu_blocks))
