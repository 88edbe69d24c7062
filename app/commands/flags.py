"""Flags that mean the same in several commands (`run`, the TUI, `acp`, `serve`; `--json`),
declared once as Annotated types for Typer: one name, short form, metavar and help wherever
they appear.

    def run(ctx: typer.Context, engine: flags.Engine = None, cwd: flags.Cwd = None, ...):
        overrides = flags.fill(Overrides, ctx.params)

A command whose flag means something else (another default, other choices) declares its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

D = TypeVar("D", bound="DataclassInstance")

Engine = Annotated[
    str | None,
    typer.Option(
        "--engine",
        "-e",
        metavar="NAME",
        help="Backend: native, vllm, remote or scripted (default: from the config).",
    ),
]
Model = Annotated[
    str | None,
    typer.Option(
        "--model",
        "-m",
        metavar="MODEL",
        help="Model directory (native, vllm) or served model name (remote).",
    ),
]
BaseUrl = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible server URL (remote), e.g. http://host:8000/v1.",
    ),
]
Script = Annotated[
    Path | None,
    typer.Option(
        "--script", metavar="FILE", help="JSON array of raw model outputs (scripted engine)."
    ),
]
Thinking = Annotated[
    str | None,
    typer.Option(
        "--thinking", "-t", metavar="MODE", help="Thinking mode: enabled, disabled or adaptive."
    ),
]
Approval = Annotated[
    str | None,
    typer.Option(
        "--approval", "-a", metavar="POLICY", help="When to ask: untrusted, on-request or never."
    ),
]
Sandbox = Annotated[
    str | None,
    typer.Option(
        "--sandbox", "-s", metavar="MODE", help="read-only, workspace-write or full-access."
    ),
]
Cwd = Annotated[
    Path | None,
    typer.Option("--cwd", "-C", metavar="DIR", help="Workspace (default: here)."),
]
Worktree = Annotated[
    str | None,
    typer.Option(
        "--worktree",
        "-w",
        metavar="NAME",
        help="Work in the git worktree .m3agent/worktrees/NAME (branch worktree-NAME), made "
        "from HEAD if missing.",
    ),
]
ContinueLast = Annotated[
    bool,
    typer.Option("--continue", "-c", help="Continue the last session of this workspace."),
]
Resume = Annotated[
    str | None,
    typer.Option("--resume", "-r", metavar="ID", help="Continue session ID."),
]
AllowHome = Annotated[
    bool,
    typer.Option("--allow-home", help="Start even in $HOME, / or a directory holding them."),
]
MaxTokens = Annotated[
    int | None,
    typer.Option("--max-tokens", metavar="N", help="Most tokens the model may generate per call."),
]
NoContext = Annotated[
    bool,
    typer.Option(
        "--no-context",
        help="Do not put a repository snapshot or instruction files (AGENTS.md, CLAUDE.md, "
        "their imports) in the prompt.",
    ),
]
OffloadExperts = Annotated[
    str | None,
    typer.Option(
        "--offload-experts",
        help="native M3: routed experts in host memory on the CPU: auto (when the weights do "
        "not fit the GPU), on, off.",
    ),
]
ExpertForm = Annotated[
    str | None,
    typer.Option(
        "--expert-form", help="native M3 offload: experts as auto, int8, int4, mxfp8 or bf16."
    ),
]
KvHostTier = Annotated[
    str | None,
    typer.Option(
        "--kv-host-tier",
        help="native: the sparse layers' K/V pages in host memory, the selected blocks fetched "
        "each step: auto (when the KV cache does not fit the GPU), on, off (docs/kv-cache.md).",
    ),
]
# `--json`, by what the commands print: a report (context, doctor), a list one object a line
# (sessions, mcp list), model's JSON (model info, model plan).
JsonReport = Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]
JsonLines = Annotated[bool, typer.Option("--json", help="One JSON object per line.")]
Json = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def fill(cls: type[D], flags: Mapping[str, object]) -> D:
    """A dataclass whose fields are named as a command's flags (settings.Overrides, RunOptions)
    from the parsed flags (`ctx.params`): the flags it has no field for are left out, and a
    repeatable flag's list becomes the field's tuple."""
    names = {f.name for f in fields(cls)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in flags.items() if k in names}
    return cls(**values)
