"""`m3agent doctor`: which sandbox layers are active here, and why the others are not."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from m3agent.tools.sandbox.policy import SandboxPolicy, parse_layers
from m3agent.tools.sandbox.report import format_report, probe

from .. import exit_codes
from ..cli_errors import die
from ..engine_check import check_engine, rows_json
from ..engine_check import format_rows as engine_rows
from ..mcp.check import check_servers, format_rows
from ..settings import load_settings
from . import flags

if TYPE_CHECKING:
    from ..settings import Settings


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(
        as_json: flags.JsonReport = False,
        cwd: Path = typer.Option(Path("."), "--cwd", help="Workspace to judge the policy for."),
        sandbox: flags.Sandbox = None,
        network: bool = typer.Option(False, "--network", help="Judge a policy with network on."),
        mcp: bool = typer.Option(True, "--mcp/--no-mcp", help="Start and check MCP servers."),
        without: list[str] = typer.Option(
            [],
            "--without",
            help="Judge as if this layer were unavailable (repeatable), e.g. "
            "--without bwrap for a machine where user namespaces are restricted.",
        ),
        # the engine to check, as `run` takes it (native: can this machine run the model, how)
        engine: flags.Engine = None,
        model: flags.Model = None,
        expert_form: flags.ExpertForm = None,
    ) -> None:
        """Probe bubblewrap, Landlock, seccomp, rlimits and cgroups; print what protects you;
        check the configured engine, or the one -e/-m name (torch/CUDA, model directory vs GPU
        memory, server)."""
        try:
            settings = load_settings().override(
                engine=engine, model=model, expert_form=expert_form, sandbox=sandbox
            )
            rules = settings.sandbox_rules.policy_fields() if settings.sandbox_rules else {}
            policy = SandboxPolicy(
                workspace=cwd,
                mode=settings.sandbox,
                **{**rules, "network": network or rules.get("network", False)},
                disabled_layers=parse_layers(without),
            )
        except ValueError as e:
            die(str(e))
        report = probe(policy)
        gaps = [*report.to_dict()["gaps"], *_private_dir_gaps(settings)]
        extras = {
            "ripgrep": shutil.which("rg") or None,
            "git": shutil.which("git") or None,
        }

        servers = check_servers(settings, policy) if mcp else []

        checked = check_engine(settings)
        if as_json:
            out = {
                **report.to_dict(),
                "gaps": gaps,
                "tools": extras,
                "mcp": servers,
                "engine": rows_json(checked),
                "sandbox_rules": settings.sandbox_rules.describe()
                if settings.sandbox_rules
                else [],
            }
            sys.stdout.write(json.dumps(out, indent=2) + "\n")
        else:
            sys.stdout.write(format_report(report) + "\n")
            for gap in gaps[len(report.to_dict()["gaps"]) :]:
                sys.stdout.write(f"  gap     {gap}\n")
            sys.stdout.write(f"  workspace  {policy.workspace}\n")
            for row in settings.sandbox_rules.describe() if settings.sandbox_rules else ():
                sys.stdout.write(f"  rule       {row}\n")  # the config's [sandbox] table
            sys.stdout.write(
                f"  grep       {'ripgrep ' + extras['ripgrep'] if extras['ripgrep'] else 'Python fallback (ripgrep not found)'}\n"
            )
            sys.stdout.write(
                f"  undo       {'git ' + extras['git'] if extras['git'] else 'unavailable: git not found'}\n"
            )
            if mcp:
                sys.stdout.write(format_rows(servers) + "\n")
            sys.stdout.write("engine:\n" + engine_rows(checked) + "\n")
        if not report.protective:
            raise typer.Exit(exit_codes.SANDBOX_UNAVAILABLE)


def _private_dir_gaps(settings: Settings) -> list[str]:
    """m3agent's data dir must be 0700: session logs and checkpoints hold the user's code."""
    out = []
    for path in (settings.home, settings.sessions_dir, settings.checkpoints_dir):
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            continue
        if mode & 0o077:
            out.append(f"{path} is mode {mode:04o}: other users can read it (chmod 700 it)")
    return out
