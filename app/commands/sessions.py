"""`m3agent sessions`: the saved sessions, newest first (resume one with `run --resume ID`)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("sessions")
    def sessions(
        limit: int = typer.Option(20, "--limit", "-n", help="Show at most N sessions (0: all)."),
        as_json: bool = typer.Option(False, "--json", help="One JSON object per line."),
    ) -> None:
        """List saved sessions: id, date, working directory, first prompt."""
        import sys
        from dataclasses import asdict

        from m3agent.agent.conversation import list_sessions
        from m3agent.app.cli_errors import die
        from m3agent.app.safe_text import dumps, visible
        from m3agent.app.settings import load_settings

        try:
            settings = load_settings()
        except ValueError as e:
            die(str(e))
        found = list_sessions(settings.sessions_dir)
        if limit > 0:
            found = found[:limit]
        if as_json:
            for s in found:
                sys.stdout.write(dumps(asdict(s)) + "\n")
            return
        if not found:
            sys.stderr.write(f"no sessions in {settings.sessions_dir}\n")
            return
        for s in found:
            prompt = " ".join(s.first_prompt.split())
            if len(prompt) > 60:
                prompt = prompt[:59] + "…"
            date = s.created.replace("T", " ")[:19]
            sys.stdout.write(visible(f"{s.id}  {date}  {s.cwd}  {prompt}") + "\n")
