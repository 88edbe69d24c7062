"""The `m3agent` command. With no sub-command it opens the terminal UI.

Each sub-command lives in app/commands/<name>.py and exposes `register(app)`. The root group
imports a command's module only when that command runs or shows its help, so `m3agent --help`,
a usage error and each command load only what they use (the modules themselves import at
their top what every run of the command needs).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

import typer
from m3agent.tools.host_programs import confine_process_path

from . import exit_codes
from .cli_help import ReadableGroup, make_readable, usage_error_line
from .commands import tui

if TYPE_CHECKING:
    from typer import _click  # the click Typer vendors

# Each sub-command and the one line `m3agent --help` shows for it (tests/app/test_cli_lazy.py
# checks each against the command's own help).
COMMANDS = {
    "run": "Run one task headless and print the answer.",
    "resume": "Open the terminal UI on a saved session (engine and model from the config).",
    "parse": "Parse raw model text from stdin the way the engine does, and print it as JSON.",
    "sessions": "List saved sessions: id, date, working directory, first prompt.",
    "doctor": "Probe bubblewrap, Landlock, seccomp, rlimits and cgroups; print what protects "
    "you; check the configured engine, or the one -e/-m name (torch/CUDA, model directory vs "
    "GPU memory, server).",
    "undo": "Restore the newest checkpoint (files changed by tools and shell commands).",
    "model": "Create and inspect native model checkpoints.",
    "generate": "Generate from token-level requests with the native engine; one JSON line each.",
    "serve": "Serve one model over HTTP until stopped.",
    "cache": "The native engine's KV cache on disk: what it keeps (sessions that survive a "
    "restart), and `clear`.",  # issue 38
    "context": "Show what the repository snapshot of a session started here would hold.",
    "mcp": "Configure MCP servers (their tools join new sessions).",
    "permissions": "A project's saved permission rules (docs/cli.md).",
    "hooks": "Hooks: programs run on session events (docs/hooks.md).",  # issue 23
    "acp": "Speak ACP over stdio (Zed, JetBrains): one warm engine for every editor session; "
    "the editor answers the approval requests.",
    "review": "Review code changes: findings with file and line (exit 2: nothing to review).",
}


def load_command(name: str) -> _click.Command:
    """The click command `m3agent NAME` runs, built from app/commands/NAME.py."""
    module = importlib.import_module(f"m3agent.app.commands.{name}")
    sub = typer.Typer(add_completion=False, rich_markup_mode=None)
    module.register(sub)
    make_readable(sub)
    return typer.main.get_group(sub).commands[name]


class CommandTable(ReadableGroup):
    """The root group: sub-commands listed from COMMANDS, each built on first use."""

    def list_commands(self, ctx: _click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: _click.Context, cmd_name: str) -> _click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.add_command(load_command(cmd_name), cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl(list(COMMANDS.items()))


def build_app() -> typer.Typer:
    app = typer.Typer(
        name="m3agent",
        help="A coding agent for MiniMax M3. Without a command, opens the terminal UI.",
        no_args_is_help=False,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,  # click's plain help: wrapped, never cut short
        context_settings={"help_option_names": ["-h", "--help"]},
        cls=CommandTable,
    )
    tui.register(app)  # the callback: `m3agent` with no sub-command
    make_readable(app)  # one place gives every command readable help
    return app


def run_cli(args: list[str] | None = None) -> int:
    """Runs the command line; returns the exit code. A usage error is one line on stderr."""
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
