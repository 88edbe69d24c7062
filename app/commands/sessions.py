"""`m3agent sessions`: the saved sessions, newest first (resume one with `m3agent resume ID`
or `run --resume ID`; `--continue` picks the last one of this directory)."""

from __future__ import annotations

import sys
from dataclasses import asdict

import typer
from m3agent.agent.session_index import list_sessions

from ..cli_errors import die
from ..safe_text import dumps, visible
from ..settings import load_settings
from . import flags


def register(app: typer.Typer) -> None:
    @app.command("sessions")
    def sessions(
        limit: int = typer.Option(20, "--limit", "-n", help="Show at most N sessions (0: all)."),
        as_json: flags.JsonLines = False,
    ) -> None:
        """List saved sessions: id, date, working directory, first prompt."""
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
            fork = f"  (fork of {s.forked_from})" if s.forked_from else ""
            sys.stdout.write(visible(f"{s.id}  {date}  {s.cwd}  {prompt}{fork}") + "\n")
