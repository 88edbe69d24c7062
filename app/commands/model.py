"""`m3agent model init-tiny PATH`, `model init-release PATH`, `model info PATH` and `model plan PATH`.

Each command here is a function of its own (`plan` and `download` have modules of their own);
register() only wires them under `m3agent model`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import typer

from ..cli_errors import die
from . import flags
from .model_download import register_download
from .model_plan import register_plan


def register(app: typer.Typer) -> None:
    model_app = typer.Typer(
        help="Create and inspect native model checkpoints.", no_args_is_help=True
    )
    app.add_typer(model_app, name="model")

    # in this order in `m3agent model --help`
    register_plan(model_app)
    register_download(model_app)
    model_app.command("init-tiny")(init_tiny)
    model_app.command("init-release")(init_release)
    model_app.command("info")(info)


def init_tiny(
    path: Path = typer.Argument(..., help="Directory to write the checkpoint into."),
    layers: int = typer.Option(4, "--layers", help="Decoder layers."),
    hidden: int = typer.Option(256, "--hidden", help="Residual width."),
    heads: int = typer.Option(4, "--heads", help="Query heads (head_dim is 128)."),
    kv_heads: int = typer.Option(2, "--kv-heads", help="KV heads (= index heads)."),
    experts: int = typer.Option(4, "--experts", help="Routed experts per MoE layer."),
    vocab: int = typer.Option(512, "--vocab", help="Vocabulary size (>= 266)."),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed, same bytes)."),
    dense_layers: int = typer.Option(
        1, "--dense-layers", help="Leading layers with dense attention and dense MLP."
    ),
    topk_blocks: int = typer.Option(16, "--topk-blocks", help="MSA blocks per query."),
    fp8: bool = typer.Option(False, "--fp8", help="Store projections as FP8 e4m3."),
    mxfp8: bool = typer.Option(
        False,
        "--mxfp8",
        help="Store projections as MXFP8 (e4m3, one e8m0 scale per 1x32 block).",
    ),
) -> None:
    """Write a random MiniMax M3 checkpoint in HF layout (config, safetensors, tokenizer)."""
    from m3agent.engine.native.loaders.tiny import TinySpec
    from m3agent.engine.native.loaders.tiny import init_tiny as write

    try:
        spec = TinySpec(
            layers=layers,
            hidden=hidden,
            heads=heads,
            kv_heads=kv_heads,
            experts=experts,
            vocab=vocab,
            seed=seed,
            dense_layers=dense_layers,
            fp8=fp8,
            mxfp8=mxfp8,
            topk_blocks=topk_blocks,
        )
        out = write(path, spec)
    except ValueError as e:
        die(str(e))
    typer.echo(f"wrote a tiny M3 checkpoint to {out}")


def init_release(
    path: Path = typer.Argument(..., help="Empty directory to write the checkpoint into."),
    moe_layers: int = typer.Option(1, "--moe-layers", help="MoE layers (the release has 57)."),
    dense_layers: int = typer.Option(3, "--dense-layers", help="Leading dense layers."),
    width: str = typer.Option(
        "m3", "--width", help="m3: the release's shapes; small: the same layout, CPU-sized."
    ),
    vision: bool = typer.Option(True, "--vision/--no-vision", help="Write the vision tower."),
    chat_template: Path | None = typer.Option(
        None, "--chat-template", help="A chat_template.jinja to ship with it."
    ),
    device: str = typer.Option(
        "auto", "--device", help="Where random numbers are drawn: auto, cpu or cuda."
    ),
    seed: int = typer.Option(0, "--seed", help="Random seed (same seed and device, same bytes)."),
) -> None:
    """Write a random M3 checkpoint laid out as the release is (MXFP8 experts, shards)."""
    from m3agent.engine.native.loaders.release import PRESETS, WriteProgress, write_release

    if width not in PRESETS:
        die(f"--width must be one of {', '.join(PRESETS)}, got {width!r}")
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"

    def show(p: WriteProgress) -> None:
        typer.echo(
            f"m3agent: shard {p.shard}/{p.shards}: {p.bytes_written / 1e9:.2f} GB "
            f"in {p.elapsed_s:.0f} s",
            err=True,
        )

    try:
        spec = replace(
            PRESETS[width],
            moe_layers=moe_layers,
            dense_layers=dense_layers,
            vision=vision,
            seed=seed,
        )
        out = write_release(path, spec, device=device, chat_template=chat_template, progress=show)
    except (ValueError, OSError) as e:
        die(str(e))
    typer.echo(f"wrote an M3 checkpoint ({spec.layers} layers) to {out}")


def info(
    path: Path = typer.Argument(..., help="Checkpoint directory or .gguf file."),
    as_json: flags.Json = False,
) -> None:
    """Architecture, layers, parameter count and dtypes of a checkpoint."""
    from m3agent.engine.native.loaders.checkpoint import checkpoint_info

    try:
        d = checkpoint_info(path)
    except ValueError as e:
        die(str(e))
    if as_json:
        typer.echo(json.dumps(d))
        return
    for k, v in d.items():
        if k == "params":
            v = f"{v:,} ({v / 1e9:.3f} B)"
        typer.echo(f"{k:>16}: {v}")
