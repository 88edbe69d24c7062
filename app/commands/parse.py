"""`m3agent parse`: raw M3 model text on stdin -> reasoning, content and tool calls as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from m3agent.engine.m3.output_parser import M3OutputParser, collect
from m3agent.engine.m3.tool_parser import tool_schemas

from ..exit_codes import USAGE_ERROR


def register(app: typer.Typer) -> None:
    @app.command("parse")
    def parse(
        tools: Path | None = typer.Option(
            None,
            "--tools",
            help="JSON file: an array of OpenAI tool objects (their schemas type the arguments).",
        ),
        thinking_mode: str = typer.Option(
            "adaptive",
            "--thinking-mode",
            help="enabled | disabled | adaptive (as the prompt was rendered).",
        ),
        chunk_size: int = typer.Option(
            0,
            "--chunk-size",
            help="Feed the streaming parser N characters at a time (0: whole text).",
        ),
    ) -> None:
        """Parse raw model text from stdin the way the engine does, and print it as JSON."""

        def fail(msg: str) -> None:
            typer.echo(f"m3agent parse: {msg}", err=True)
            raise typer.Exit(USAGE_ERROR)

        if thinking_mode not in ("enabled", "disabled", "adaptive"):
            fail(f"--thinking-mode must be enabled, disabled or adaptive, not {thinking_mode!r}")
        if chunk_size < 0:
            fail(f"--chunk-size must be 0 or more, not {chunk_size}")
        tool_list: list[Any] = []
        if tools is not None:
            try:
                tool_list = json.loads(tools.read_text(encoding="utf-8"))
            except OSError as e:
                fail(f"cannot read --tools file {tools}: {e.strerror or e}")
            except ValueError as e:
                fail(f"--tools file {tools} is not valid JSON: {e}")
            if not isinstance(tool_list, list):
                fail(f"--tools file {tools} must hold a JSON array of tool objects")
            try:
                tool_schemas(tool_list)
            except ValueError as e:
                fail(f"--tools file {tools}: {e}")
        try:
            text = sys.stdin.buffer.read().decode("utf-8")
        except UnicodeDecodeError as e:
            fail(f"stdin is not UTF-8 text (byte {e.start}: {e.reason})")
        parser = M3OutputParser(tool_list, thinking_mode)
        deltas = []
        step = chunk_size or max(len(text), 1)
        for i in range(0, len(text), step):
            deltas += parser.feed(text[i : i + step])
        deltas += parser.finish()
        result = collect(deltas, parser.reasoning_seen)
        out = {
            "reasoning": result.reasoning,
            "content": result.content,
            "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in result.tool_calls],
        }
        typer.echo(json.dumps(out, ensure_ascii=False, indent=2))
