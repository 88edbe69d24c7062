"""Readable `--help` and one-line usage errors for every command.

Typer prints type labels (`<bool>`, `<list[Path]>`, `{prompt}`) and, with rich, boxes that
cut long choices short. Help here is click's plain layout (wrapped, never cut), with each type
label turned into a word a user reads as a placeholder (TEXT, N, PATH) and flags shown bare.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    import typer
    from typer import _click  # the click Typer vendors: its Context, HelpFormatter, Command

_LABEL = re.compile(r" <([a-zA-Z_]+)(?:\[([a-zA-Z_]+)\])?(?: range)?>")
_REQUIRED_ARG = re.compile(r"\{([a-zA-Z_]+)\}")
_WORDS = {"str": "TEXT", "int": "N", "float": "NUMBER", "path": "PATH", "bool": ""}
Row = tuple[str, str]  # a help row: (the flags or argument, its help)


def _word(match: re.Match[str]) -> str:
    outer, inner = match.group(1).lower(), match.group(2)
    label = (inner or outer).lower()
    word = _WORDS.get(label, label.upper())
    return f" {word}" if word else ""


def _records(command: _click.Command, ctx: _click.Context) -> tuple[list[Row], list[Row]]:
    """(arguments, options) help rows, with readable placeholders in the first column."""
    args: list[Row] = []
    opts: list[Row] = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        name, help_text = record
        if param.param_type_name == "argument":
            args.append((_LABEL.sub("", name).upper(), help_text))  # "PROMPT <str>" -> PROMPT
        else:
            opts.append((_LABEL.sub(_word, name), help_text))
    return args, opts


def _format_options(
    command: _click.Command, ctx: _click.Context, formatter: _click.HelpFormatter
) -> None:
    args, opts = _records(command, ctx)
    if args:
        with formatter.section("Arguments"):
            formatter.write_dl(args)
    if opts:
        with formatter.section("Options"):
            formatter.write_dl(opts)


def _usage(pieces: list[str]) -> list[str]:
    return [_REQUIRED_ARG.sub(lambda m: m.group(1).upper(), p) for p in pieces]


class ReadableCommand(TyperCommand):
    def format_options(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        _format_options(self, ctx, formatter)

    def collect_usage_pieces(self, ctx: _click.Context) -> list[str]:
        return _usage(super().collect_usage_pieces(ctx))


class ReadableGroup(TyperGroup):
    def format_options(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        _format_options(self, ctx, formatter)
        self.format_commands(ctx, formatter)

    def format_commands(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        # Each command's first sentence, wrapped rather than cut off with "...".
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=300)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def collect_usage_pieces(self, ctx: _click.Context) -> list[str]:
        return _usage(super().collect_usage_pieces(ctx))


def usage_error_line(error: Exception) -> str:
    """`error: <message> (m3agent run -h for help)`: one line for a click/typer usage error."""
    message = " ".join(str(error.format_message()).split())  # type: ignore[attr-defined]
    ctx = getattr(error, "ctx", None)
    where = f" ({ctx.command_path} -h for help)" if ctx is not None else ""
    return f"error: {message}{where}"


def make_readable(app: typer.Typer) -> None:
    """Every command and sub-group of a Typer app (recursively) gets the readable help."""
    for info in app.registered_commands:
        if info.cls in (None, TyperCommand):
            info.cls = ReadableCommand
    for group in app.registered_groups:
        sub = group.typer_instance
        if sub is None:
            continue
        if group.cls in (None, TyperGroup) or not isinstance(group.cls, type):
            group.cls = ReadableGroup
        make_readable(sub)
