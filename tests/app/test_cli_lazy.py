"""The root command builds a sub-command only when it runs or shows its help (app/cli.py):
`m3agent --help` lists every command from the table without importing their modules, and
each line it shows is the command's own first help sentence."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from m3agent.app.cli import COMMANDS, load_command


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_listed_line_is_the_commands_own_help(name: str) -> None:
    assert load_command(name).get_short_help_str(limit=300) == COMMANDS[name]


def _modules_after(args: list[str]) -> list[str]:
    probe = (
        "import json, sys\n"
        "from m3agent.app.cli import run_cli\n"
        f"run_cli({args!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    return list(json.loads(out.strip().splitlines()[-1]))


def test_root_help_imports_no_command_module_but_the_callbacks() -> None:
    loaded = _modules_after(["--help"])
    assert [m for m in loaded if m.startswith("m3agent.app.commands.")] == [
        "m3agent.app.commands.flags",
        "m3agent.app.commands.tui",
    ]
    # nor what every command needs but help does not: settings, pydantic, asyncio
    assert not {"m3agent.app.settings", "pydantic", "asyncio"} & set(loaded)


def test_a_command_imports_its_own_module_only() -> None:
    loaded = _modules_after(["sessions", "--help"])
    assert "m3agent.app.commands.sessions" in loaded
    assert not {f"m3agent.app.commands.{n}" for n in ("run", "mcp", "serve")} & set(loaded)


def test_an_unknown_command_is_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "m3agent.app.cli", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr == "error: No such command 'nope'. (m3agent -h for help)\n"
