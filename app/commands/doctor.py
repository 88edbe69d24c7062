"""`m3agent doctor`: which sandbox layers are active here, and why the others are not."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("doctor")
    def doctor(
        as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
        cwd: Path = typer.Option(Path("."), "--cwd", help="Workspace to judge the policy for."),
        sandbox: str | None = typer.Option(
            None, "--sandbox", help="read-only|workspace-write|full-access (default: settings)."
        ),
        network: bool = typer.Option(False, "--network", help="Judge a policy with network on."),
        mcp: bool = typer.Option(True, "--mcp/--no-mcp", help="Start and check MCP servers."),
    ) -> None:
        """Probe bubblewrap, Landlock, seccomp, rlimits and cgroups; print what protects you."""
        import json
        import shutil
        import sys

        from m3agent.app import exit_codes
        from m3agent.app.cli_errors import die
        from m3agent.app.settings import load_settings
        from m3agent.tools.sandbox.policy import SandboxPolicy
        from m3agent.tools.sandbox.report import format_report, probe

        try:
            settings = load_settings()
            policy = SandboxPolicy(
                workspace=cwd, mode=sandbox or settings.sandbox, network=network
            )
        except ValueError as e:
            die(str(e))
        report = probe(policy)
        extras = {
            "ripgrep": shutil.which("rg") or None,
            "git": shutil.which("git") or None,
        }
        from m3agent.app.mcp_check import check_servers, format_rows

        servers = check_servers(settings, policy) if mcp else []
        if as_json:
            out = {**report.to_dict(), "tools": extras, "mcp": servers}
            sys.stdout.write(json.dumps(out, indent=2) + "\n")
        else:
            sys.stdout.write(format_report(report) + "\n")
            sys.stdout.write(f"  workspace  {policy.workspace}\n")
            sys.stdout.write(f"  grep       {'ripgrep ' + extras['ripgrep'] if extras['ripgrep'] else 'Python fallback (ripgrep not found)'}\n")
            sys.stdout.write(f"  undo       {'git ' + extras['git'] if extras['git'] else 'unavailable: git not found'}\n")
            if mcp:
                sys.stdout.write(format_rows(servers) + "\n")
        if not report.protective:
            raise typer.Exit(exit_codes.SANDBOX_UNAVAILABLE)
