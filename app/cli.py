"""The `m3agent` command. With no sub-command it opens the TUI.

Each sub-command lives in app/commands/<name>.py and exposes `register(app)`; heavy imports
happen inside the command functions so that `m3agent --help` and the TUI start fast.
"""

from __future__ import annotations

import importlib
import sys

import typer
from m3agent.tools.host_programs import confine_process_path

COMMANDS = (
    "tui",  # the callback: `m3agent` with no sub-command
    "run",
    "resume",
    "parse",
    "sessions",
    "doctor",
    "undo",
    "model",
    "generate",
    "serve",
    "cache",  # issue 38: the native engine's KV disk cache
    "context",
    "mcp",
    "permissions",
    "hooks",  # issue 23: hooks, commands, skills, subagents, ACP (app/extensions.py)
    "acp",
    "review",  # issue 37: Codex's review mode (app/commands/review.py)
)


def build_app() -> typer.Typer:
    from .cli_help import ReadableGroup, make_readable

    app = typer.Typer(
        name="m3agent",
        help="A coding agent for MiniMax M3. Without a command, opens the terminal UI.",
        no_args_is_help=False,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # click's plain help: wrapped, never cut short
        context_settings={"help_option_names": ["-h", "--help"]},
        cls=ReadableGroup,
    )
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"m3agent.app.commands.{name}")
        except ModuleNotFoundError as e:  # a command not built yet in this checkout
            if e.name != f"m3agent.app.commands.{name}":
                raise
            continue
        module.register(app)
    make_readable(app)  # one place gives every command readable help
    return app


def run_cli(args: list[str] | None = None) -> int:
    """Runs the command line; returns the exit code. A usage error is one line on stderr."""
    from . import exit_codes
    from .cli_help import usage_error_line

    try:
        code = build_app()(args=args, prog_name="m3agent", standalone_mode=False)
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        sys.stderr.write("interrupted\n")
        return exit_codes.INTERRUPTED
    except ImportError as e:
        # An optional package (torch, vllm, ...) missing: the install line, not a traceback.
        from .missing_extra import missing_extra

        message = missing_extra(e)
        if message is None:
            raise
        sys.stderr.write(f"error: {message}\n")
        return exit_codes.ENGINE_UNAVAILABLE
    except Exception as e:
        # Typer's (vendored) click errors: bad option, missing argument, bad value.
        if not (hasattr(e, "format_message") and hasattr(e, "exit_code")):
            raise
        line = usage_error_line(e)
        sys.stderr.write(line + "\n")
        if _json_output(sys.argv[1:] if args is None else args):
            # A script reading stdout gets its JSON object for a bad flag too (docs/cli.md).
            from .headless_result import early_error_line

            sys.stdout.write(early_error_line(int(e.exit_code), line.removeprefix("error: ")))
            sys.stdout.flush()
        return int(e.exit_code)
    return code if isinstance(code, int) else exit_codes.OK


def _json_output(args: list[str]) -> bool:
    """`--output-format json|stream-json` among the words of a command line that did not
    parse (so read as written, up to a `--`)."""
    for i, word in enumerate(args):
        if word == "--":
            return False
        value = None
        if word == "--output-format" and i + 1 < len(args):
            value = args[i + 1]
        elif word.startswith("--output-format="):
            value = word.partition("=")[2]
        if value in ("json", "stream-json"):
            return True
    return False


def main() -> None:
    # What this process and its libraries run on the host (compilers, a background serve)
    # is never found in the working directory's tree; sessions narrow it to their roots too.
    confine_process_path((), cwd=True)
    sys.exit(run_cli())


if __name__ == "__main__":
    main()
