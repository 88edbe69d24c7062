"""`m3agent generate`: token-level generation from a JSONL file of requests on one engine.

Each input line: {"id", "prompt" | "prompt_token_ids", "max_tokens", "temperature", "top_p",
"top_k", "seed", "stop", "stop_token_ids", "ignore_eos"}. Each output line (stdout, one per
request, as it finishes): the generated token ids and text, prompt / cached / generated token
counts and timings. A bad input line stops everything before the model loads (exit 2); a
request the engine rejects (e.g. a prompt that is too long) gets an "error" line, the others
still run, and the exit code is 1.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from m3agent.engine.api import EngineError, EngineUnavailable, SamplingParams
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .. import exit_codes
from ..cli_errors import die
from ..jsonl import parse_jsonl

_SAMPLING = {f.name for f in dataclasses.fields(SamplingParams)}


class RequestLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str | int
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None
    max_tokens: int = Field(64, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)
    seed: int | None = None
    stop: list[str] = []
    stop_token_ids: list[int] = []
    ignore_eos: bool = False

    @model_validator(mode="after")
    def _one_prompt(self) -> RequestLine:
        if (self.prompt is None) == (self.prompt_token_ids is None):
            raise ValueError("give exactly one of prompt and prompt_token_ids")
        if self.prompt_token_ids is not None and not self.prompt_token_ids:
            raise ValueError("prompt_token_ids is empty")
        if self.prompt is not None and not self.prompt:
            raise ValueError("prompt is empty")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must not be empty")
        return self

    def sampling(self) -> SamplingParams:
        """The line's sampling fields, named as SamplingParams names them (lists as tuples)."""
        fields: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v
            for k, v in self.model_dump(include=_SAMPLING).items()
        }
        return SamplingParams(**fields)


def parse_request_lines(path: Path) -> list[RequestLine]:
    """Every line validated before anything loads; the first bad one is named in the error."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not UTF-8 text") from None
    out: list[RequestLine] = []
    seen: set[str] = set()
    for n, obj in parse_jsonl(text, lambda n, why: f"{path} line {n}: not JSON ({why})"):
        if not isinstance(obj, dict):
            raise ValueError(f"{path} line {n}: expected a JSON object")
        try:
            line = RequestLine.model_validate(obj)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            msg = err["msg"].removeprefix("Value error, ")
            raise ValueError(f"{path} line {n}: {where + ': ' if where else ''}{msg}") from None
        if str(line.id) in seen:
            raise ValueError(f"{path} line {n}: duplicate id {line.id!r}")
        seen.add(str(line.id))
        out.append(line)
    if not out:
        raise ValueError(f"{path} holds no requests")
    return out


def run_requests(
    lines: list[RequestLine],
    model: Path,
    device: str,
    dtype: str,
    concurrent: bool,
    engine_kwargs: dict[str, Any],
    emit: Callable[[dict[str, Any]], None],
    warn: Callable[[str], None],
) -> int:
    from m3agent.engine.native.core.engine_config import EngineConfig
    from m3agent.engine.native.llm import DTYPES, LLM

    if dtype not in DTYPES:
        warn(f"error: unknown --dtype {dtype!r} (try {', '.join(DTYPES)})")
        return exit_codes.USAGE_ERROR
    needs_text = any(x.prompt is not None or x.stop for x in lines)
    try:
        config = EngineConfig(device=device, **engine_kwargs)
        llm = LLM.from_model_dir(
            model,
            device=device,
            dtype=dtype,
            config=config,
            need_tokenizer=needs_text,
            vision=False,
        )
    except ValueError as e:
        warn(f"error: cannot load the native model from {model}: {str(e).splitlines()[0]}")
        return exit_codes.ENGINE_UNAVAILABLE
    except EngineUnavailable as e:
        warn(f"error: {e}")
        return exit_codes.ENGINE_UNAVAILABLE
    tokenizer = llm.tokenizer

    started = time.monotonic()
    code = exit_codes.OK
    total_generated = 0
    pending: dict[str, RequestLine] = {}

    def submit(line: RequestLine) -> bool:
        nonlocal code
        ids = line.prompt_token_ids
        if ids is None:  # a text prompt: the tokenizer was loaded for it (needs_text)
            assert tokenizer is not None and line.prompt is not None
            ids = tokenizer.encode(line.prompt)
        try:
            llm.add_request(str(line.id), ids, line.sampling())
        except (EngineError, ValueError) as e:
            emit({"id": line.id, "error": str(e)})
            code = exit_codes.INTERNAL_ERROR
            return False
        pending[str(line.id)] = line
        return True

    def drain() -> None:
        nonlocal code, total_generated
        while llm.has_unfinished_requests():
            for out in llm.step():
                if not out.finished:
                    continue
                line = pending.pop(out.request_id)
                total_generated += out.num_generated_tokens
                if out.error:
                    code = exit_codes.INTERNAL_ERROR
                emit(_result(line, out))

    if concurrent:
        for line in lines:
            submit(line)
        drain()
    else:
        for line in lines:
            if submit(line):
                drain()
    wall = time.monotonic() - started
    warn(
        f"{len(lines)} requests, {total_generated} tokens generated in {wall:.2f}s "
        f"({total_generated / wall if wall > 0 else 0.0:.1f} tok/s), {llm.num_steps} steps"
    )
    return code


def _result(line: RequestLine, out: Any) -> dict[str, Any]:
    m = out.metrics
    ttft = m.time_to_first_token_s
    total = m.total_time_s
    decode_s = (m.finished_time - m.first_token_time) if m.first_token_time else None
    result: dict[str, Any] = {
        "id": line.id,
        "token_ids": list(out.token_ids),
        "text": out.text,
        "finish_reason": out.finish_reason,
        "stop_reason": out.stop_reason,
        "prompt_tokens": out.num_prompt_tokens,
        "cached_tokens": out.num_cached_tokens,
        "generated_tokens": out.num_generated_tokens,
        "ttft_s": round(ttft, 6) if ttft is not None else None,
        "total_s": round(total, 6) if total is not None else None,
        "decode_tokens_per_s": (
            round((out.num_generated_tokens - 1) / decode_s, 3) if decode_s else None
        ),
    }
    if out.error:
        result["error"] = out.error
    return result


def register(app: typer.Typer) -> None:
    @app.command("generate")
    def generate(
        model: Path = typer.Option(..., "--model", help="Checkpoint directory or .gguf file."),
        requests: Path = typer.Option(..., "--requests", help="JSONL file, one request a line."),
        engine: str = typer.Option("native", "--engine", help="Only 'native' is supported."),
        concurrent: bool = typer.Option(False, "--concurrent", help="Submit all requests at once."),
        device: str = typer.Option("cpu", "--device", help="cpu or cuda[:N]."),
        dtype: str = typer.Option("float32", "--dtype", help="float32, bfloat16 or float16."),
        max_num_batched_tokens: int = typer.Option(2048, "--max-num-batched-tokens"),
        max_num_seqs: int = typer.Option(64, "--max-num-seqs"),
        max_model_len: int | None = typer.Option(None, "--max-model-len"),
        num_gpu_blocks: int | None = typer.Option(
            None, "--num-gpu-blocks", help="KV pages (128 tokens each), overriding the budget."
        ),
        no_prefix_caching: bool = typer.Option(False, "--no-prefix-caching"),
        kv_cache_dtype: str = typer.Option(
            "auto",
            "--kv-cache-dtype",
            help="auto (the model dtype) or fp8 (e4m3 K/V and index keys: half the memory).",
        ),
        enforce_eager: bool = typer.Option(
            False, "--enforce-eager", help="No CUDA graphs for decode steps (CUDA only)."
        ),
        kv_host_tier: bool = typer.Option(
            False,
            "--kv-host-tier",
            help="MSA layers' K/V pages in host memory, selected blocks fetched per step.",
        ),
        kv_device_blocks: int = typer.Option(
            128, "--kv-device-blocks", help="The host tier's device cache, blocks per MSA layer."
        ),
    ) -> None:
        """Generate from token-level requests with the native engine; one JSON line each."""
        if engine != "native":
            die(f"--engine {engine!r} is not supported by generate (use native)")
        if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
            die(f"--device must be cpu or cuda[:N], not {device!r}")
        if kv_cache_dtype not in ("auto", "fp8", "fp8_e4m3"):
            die(f"--kv-cache-dtype must be auto or fp8, not {kv_cache_dtype!r}")
        if kv_device_blocks < 1:
            die(f"--kv-device-blocks must be >= 1, not {kv_device_blocks}")
        try:
            lines = parse_request_lines(requests)
        except ValueError as e:
            die(str(e))
        code = run_requests(
            lines,
            model=model,
            device=device,
            dtype=dtype,
            concurrent=concurrent,
            engine_kwargs={
                "max_num_batched_tokens": max_num_batched_tokens,
                "max_num_seqs": max_num_seqs,
                "max_model_len": max_model_len,
                "num_gpu_blocks": num_gpu_blocks,
                "enable_prefix_caching": not no_prefix_caching,
                "kv_cache_dtype": kv_cache_dtype,
                "enforce_eager": enforce_eager,
                "kv_host_tier": kv_host_tier,
                "kv_device_blocks": kv_device_blocks,
            },
            emit=lambda obj: typer.echo(json.dumps(obj, ensure_ascii=False)),
            warn=lambda msg: typer.echo(msg, err=True),
        )
        raise typer.Exit(code)
