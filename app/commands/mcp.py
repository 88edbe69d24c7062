"""`m3agent mcp add|list|get|remove|trust|login|logout`: the MCP servers sessions start.

`add` writes a `[mcp_servers.NAME]` table to the user config (`--scope user`, the default)
or an entry to `./.mcp.json` (`--scope project`, Claude Code's file). Nothing here starts a
server; `m3agent doctor` does, to check them.

Each command is a function of its own (its signature is its command line); register() only
wires them under `m3agent mcp`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ..cli_errors import die
from ..mcp.oauth import login_status, run_login, run_logout
from ..safe_text import write_trust_lines
from ..settings import load_settings
from . import flags

if TYPE_CHECKING:
    from m3agent.tools.mcp.config import McpServerConfig

    from ..settings import Settings

# The `--cwd` of the commands that read the project's .mcp.json, and the `--scope` of add and
# remove, declared once.
ReadCwd = Annotated[Path, typer.Option("--cwd", help="Project whose .mcp.json to read.")]
ScopeFlag = Annotated[str, typer.Option("--scope", "-s", help="user|project (./.mcp.json).")]


def _parse_pairs(values: list[str], sep: str, what: str) -> dict[str, str]:
    out = {}
    for v in values:
        key, found, val = v.partition(sep)
        if not found or not key.strip():
            die(f"{what} {v!r}: expected KEY{sep}VALUE")
        out[key.strip()] = val.strip() if sep == ":" else val
    return out


def _servers(cwd: Path) -> tuple[Settings, list[tuple[McpServerConfig, bool]]]:
    """(settings, [(server, trusted)]) of the user config and the project's .mcp.json."""
    from ..mcp.settings import is_trusted, project_entries

    try:
        settings = load_settings()
        rows = [(s, True) for s in settings.mcp_servers]
        project, refused = project_entries(cwd, os.environ)
        rows += [(s, is_trusted(settings.home, cwd, s)) for s in project]
    except ValueError as e:
        die(str(e))

    # an entry the project may not have (LD_PRELOAD, ${TOKEN}): said once, escaped
    write_trust_lines(sys.stderr, (f"error: {line}" for line in refused))
    return settings, rows


def register(app: typer.Typer) -> None:
    mcp = typer.Typer(
        help="Configure MCP servers (their tools join new sessions).", no_args_is_help=True
    )
    app.add_typer(mcp, name="mcp")
    mcp.command("add")(add)
    mcp.command("list")(list_)
    mcp.command("get")(get)
    mcp.command("remove")(remove)
    mcp.command("trust")(trust_)
    mcp.command("login")(login_)
    mcp.command("logout")(logout)


# The commands, one function each: the signature is the command line (Typer reads it), the
# docstring its help.


def add(
    name: str = typer.Argument(..., help="Server name (tools become mcp__NAME__TOOL)."),
    command: list[str] = typer.Argument(
        None, metavar="ARGS", help="stdio: the command and its arguments (put them after --)."
    ),
    url: str | None = typer.Option(None, "--url", help="A remote server's URL."),
    transport: str = typer.Option("http", "--transport", help="With --url: http|sse."),
    env: list[str] = typer.Option([], "--env", "-e", help="KEY=VALUE for the server."),
    header: list[str] = typer.Option([], "--header", "-H", help="'Name: value' (remote)."),
    network: bool = typer.Option(False, "--network", help="Let a stdio server use the network."),
    scope: ScopeFlag = "user",
) -> None:
    """Add a server: `m3agent mcp add NAME -- CMD [ARG]` or `add NAME --url URL`."""
    from m3agent.tools.mcp.config import Scope, from_claude

    from ..mcp.store import add_project_server, add_user_server

    if scope not in ("user", "project"):
        die(f"unknown scope {scope!r} (user or project)")
    if bool(url) == bool(command):
        die("give either a command (after --) or --url, not both")
    envs, headers = _parse_pairs(env, "=", "--env"), _parse_pairs(header, ":", "--header")
    entry = _mcp_json_entry(command, url, transport, envs, headers, network)
    try:
        from_claude(name, entry, scope=Scope.USER, source="", env={})  # validate first
        if scope == "project":
            path = Path.cwd() / ".mcp.json"
            add_project_server(path, name, entry)
        else:
            path = load_settings().config_path
            table = _config_table(command, url, transport, envs, headers, network)
            add_user_server(path, name, table)
    except (ValueError, OSError) as e:
        die(str(e))
    sys.stdout.write(f"added MCP server {name} to {path}\n")


def _mcp_json_entry(
    command: list[str],
    url: str | None,
    transport: str,
    envs: dict[str, str],
    headers: dict[str, str],
    network: bool,
) -> dict[str, object]:
    """The server as a .mcp.json entry (Claude Code's fields): what --scope project writes,
    and the form every new server is validated in."""
    if url:
        return {"type": transport, "url": url, "headers": headers}
    entry: dict[str, object] = {"command": command[0], "args": command[1:], "env": envs}
    if network:
        entry["network"] = True
    return entry


def _config_table(
    command: list[str],
    url: str | None,
    transport: str,
    envs: dict[str, str],
    headers: dict[str, str],
    network: bool,
) -> dict[str, object]:
    """The server as a `[mcp_servers.NAME]` table of the user config (its own field names;
    http is the default transport there, so it is left out; so is network = false)."""
    if url and transport == "http":
        return {"url": url, "http_headers": headers}
    if url:
        return {"type": transport, "url": url, "http_headers": headers}
    return {"command": command[0], "args": command[1:], "env": envs, "network": network or None}


def list_(
    as_json: flags.JsonLines = False,
    cwd: ReadCwd = Path("."),
) -> None:
    """The configured servers: name, scope, trust, how it starts."""
    _, rows = _servers(cwd.resolve())
    if not rows:
        sys.stderr.write("no MCP servers configured (add one with `m3agent mcp add`)\n")
        return

    for s, trusted in rows:
        if as_json:
            sys.stdout.write(json.dumps({**s.to_dict(), "trusted": trusted}) + "\n")
        else:
            mark = "" if trusted else "  (not trusted: `m3agent mcp trust`)"
            off = "" if s.enabled else "  (disabled)"
            line = f"{s.name}  {s.scope.value}  {s.describe()}{off}{mark}"
            write_trust_lines(sys.stdout, [line])


def get(
    name: str = typer.Argument(...),
    as_json: bool = typer.Option(False, "--json", help="Print it as JSON."),
    cwd: ReadCwd = Path("."),
) -> None:
    """One server's settings (secrets in env and headers shown as ***)."""
    settings, rows = _servers(cwd.resolve())
    found = [(s, t) for s, t in rows if s.name == name]
    if not found:
        die(f"no MCP server named {name!r}")
    s, trusted = found[-1]  # the project's entry over the user's of the same name
    d = {**s.to_dict(), "trusted": trusted}

    oauth = login_status(settings.home, s)
    if oauth is not None:
        d["oauth"] = oauth
    if as_json:
        sys.stdout.write(json.dumps(d, indent=2) + "\n")
        return

    write_trust_lines(sys.stdout, [name, *(f"  {k}: {v}" for k, v in d.items() if k != "name")])


def remove(
    name: str = typer.Argument(...),
    scope: ScopeFlag = "user",
) -> None:
    """Remove a server from the user config or from ./.mcp.json."""
    from ..mcp.store import remove_project_server, remove_user_server

    try:
        if scope == "project":
            path = Path.cwd() / ".mcp.json"
            done = remove_project_server(path, name)
        elif scope == "user":
            path = load_settings().config_path
            done = remove_user_server(path, name)
        else:
            die(f"unknown scope {scope!r} (user or project)")
    except (ValueError, OSError) as e:
        die(str(e))
    if not done:
        die(f"no MCP server named {name!r} in {path}")
    sys.stdout.write(f"removed MCP server {name} from {path}\n")


def trust_(
    names: list[str] = typer.Argument(
        None, metavar="ARGS", help="Servers to trust (default: all)."
    ),
    cwd: Path = typer.Option(Path("."), "--cwd", help="Project whose .mcp.json to trust."),
) -> None:
    """Trust this project's .mcp.json servers (asked once; a changed entry asks again)."""
    from m3agent.tools.mcp.entry_rules import trust_lines

    from ..mcp.settings import trust

    where = cwd.resolve()
    settings, rows = _servers(where)
    project = [s for s, _ in rows if s.scope.value == "project"]
    chosen = [s for s in project if not names or s.name in names]
    missing = set(names or ()) - {s.name for s in chosen}
    if missing:
        die(f"no server(s) {', '.join(sorted(missing))} in {where / '.mcp.json'}")
    if not chosen:
        die(f"no project MCP servers in {where / '.mcp.json'}")
    for s in chosen:
        # Every field the trust covers, in full: what runs, its variables, headers, network;
        # each line escaped (the repository's ESC or CR never redraws what is shown).
        write_trust_lines(sys.stdout, [f"trusting {s.name}: {s.describe()}", *trust_lines(s)])
    trust(settings.home, where, chosen)


def login_(
    name: str = typer.Argument(..., help="An HTTP server of the config."),
    cwd: ReadCwd = Path("."),
    mcp_config: list[Path] = typer.Option(
        [], "--mcp-config", help="Also read servers from this .mcp.json-style file."
    ),
    no_browser: bool = typer.Option(
        False, "--no-browser", help="Only print the URL (open it anywhere)."
    ),
    timeout: float = typer.Option(300.0, "--timeout", help="Seconds to wait for the redirect."),
) -> None:
    """Log in to an HTTP server with OAuth (browser, redirect to 127.0.0.1); exit 6 if not."""
    try:
        settings = load_settings()
        if mcp_config:
            settings = settings.override(mcp_config_files=tuple(str(p) for p in mcp_config))
    except ValueError as e:
        die(str(e))
    code = run_login(settings, cwd.resolve(), name, browser=not no_browser, timeout_s=timeout)
    raise typer.Exit(code)


def logout(name: str = typer.Argument(...)) -> None:
    """Forget the stored OAuth tokens of a server."""
    try:
        settings = load_settings()
    except ValueError as e:
        die(str(e))
    raise typer.Exit(run_logout(settings, name))
