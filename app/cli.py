"""The `m3agent` command. With no sub-command it opens the TUI.

Each sub-command lives in app/commands/<name>.py and exposes `register(app)`; heavy imports
happen inside the command functions so that `m3agent --help` and the TUI start fast.
"""

from __future__ import annotations

import importlib

import typer

COMMANDS = (
    "tui",  # the callback: `m3agent` with no sub-command
    "run",
    "parse",
    "sessions",
    "doctor",
    "undo",
    "model",
    "generate",
    "serve",
    "context",
    "mcp",
)


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="m3agent",
        help="A coding agent for MiniMax M3. Without a command, opens the terminal UI.",
        no_args_is_help=False,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"m3agent.app.commands.{name}")
        except ModuleNotFoundError as e:  # a command not built yet in this checkout
            if e.name != f"m3agent.app.commands.{name}":
                raise
            continue
        module.register(app)
    return app


def main() -> None:
    build_app()()


if __name__ == "__main__":
    main()
