"""`m3agent acp`: serve the Agent Client Protocol on stdin/stdout for an editor (docs/acp.md)."""

from __future__ import annotations

import asyncio
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, cast

import typer
from m3agent.engine.api import EngineError

from .. import exit_codes
from ..cli_errors import die
from ..settings import load_settings
from . import flags

if TYPE_CHECKING:
    from pathlib import Path

    from acp.interfaces import Agent

    from ..settings import Settings


def register(app: typer.Typer) -> None:
    @app.command("acp")
    def acp_(
        engine: flags.Engine = None,
        model: flags.Model = None,
        base_url: flags.BaseUrl = None,
        script: flags.Script = None,
        approval: flags.Approval = None,
        sandbox: flags.Sandbox = None,
        no_context: flags.NoContext = False,
    ) -> None:
        """Speak ACP over stdio (Zed, JetBrains): one warm engine for every editor session; the
        editor answers the approval requests."""
        try:
            settings = load_settings().override(
                engine=engine,
                model=model,
                base_url=base_url,
                approval=approval,
                sandbox=sandbox,
                context=False if no_context else None,
            )
        except ValueError as e:
            die(str(e))
        code = asyncio.run(_serve(settings, script))
        if code:
            sys.stderr.write("error: the ACP server stopped\n")
        raise typer.Exit(code or exit_codes.OK)


async def _serve(settings: Settings, script: Path | None) -> int:
    try:
        import acp
    except ImportError:
        sys.stderr.write("error: m3agent acp needs the 'acp' extra: pip install 'm3agent[acp]'\n")
        return 2

    from ..acp.server import M3AcpAgent
    from ..engine_build import build_engine

    # Nothing configured (or a model that cannot load) is said through the protocol: the
    # editor completes its handshake and shows the reason when it opens a session, instead of
    # a process that died before answering (docs/acp.md).
    engine = None
    unavailable = None
    try:
        engine = build_engine(settings, script=script, start_server=True)
    except (ValueError, EngineError) as e:
        unavailable = f"{e}; {SET_UP}"
        sys.stderr.write(f"error: {unavailable}\n")  # the editor's agent log
    try:
        ours = version("m3agent")
    except PackageNotFoundError:
        ours = "0"
    agent = M3AcpAgent(settings, engine, ours, unavailable=unavailable)
    try:
        # acp's Agent protocol lists every optional method; its router answers "method not
        # found" for those M3AcpAgent leaves out.
        await acp.run_agent(cast("Agent", agent))
    finally:
        await agent.close_all()
        if engine is not None:
            await engine.close()
    return 0


SET_UP = (
    "choose an engine by running `m3agent` once in a terminal, or give the agent's args in "
    'the editor\'s settings, e.g. ["acp", "--engine", "remote", "--base-url", URL] (docs/acp.md)'
)
