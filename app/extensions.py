"""What issue 23 adds to a session, in one place: hooks (trust applied), skills (listed in
the system block, loaded by the `skill` tool), `update_plan`, custom commands, and the `task`
tool with its agent definitions. The factory calls `session_extras` once and hands the Extras
to the Session it builds (`Session.extensions`, the session's own: no table here outlives or
mixes sessions); front ends read `commands_of(session)` for their `/` menu.

Everything here is decided when the session starts: the tool list and the system block
open the prompt, so they never change afterwards (prefix caching).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from m3agent.agent.config import AgentConfig, Verdict
from m3agent.agent.events import Error, ErrorKind
from m3agent.agent.subagents import TaskTool, load_agents
from m3agent.tools.base import Capability, Touches
from m3agent.tools.extra_toolset import ExtendedToolset
from m3agent.tools.host_read import HostReader
from m3agent.tools.skills import SkillTool, discover_skills, skills_listing
from m3agent.tools.update_plan import UpdatePlan

from .custom_commands import CustomCommand, find, load_commands, skill_commands
from .hooks_settings import session_hooks
from .prefix_rules import trusted_file
from .sandbox_settings import sandbox_policy
from .settings import Settings
from .slash import NAMES

if TYPE_CHECKING:
    from m3agent.agent.approvals import ApprovalGate
    from m3agent.agent.hooks import Hooks
    from m3agent.agent.ops import UserTurn
    from m3agent.agent.session import Session
    from m3agent.engine.api import Engine
    from m3agent.tools.sandbox.runner import Sandbox
    from m3agent.tools.toolset import ToolsetProtocol

# Kept out of the repository snapshot (gitignore patterns): a skill's body is loaded only
# when the model asks for it; commands and agent definitions are instructions, not code.
SNAPSHOT_SKIP = (
    ".m3agent/skills/",
    ".m3agent/commands/",
    ".m3agent/agents/",
    ".claude/skills/",
    ".claude/commands/",
    ".claude/agents/",
    ".agents/skills/",
)


def user_dir(settings: Settings) -> Path:
    return settings.user_dir or settings.home


# The user's own definitions first: an earlier directory wins a name, and a repository's file
# never stands in for one the user wrote (issue 36).
def skill_roots(settings: Settings, cwd: Path) -> list[Path]:
    # Then the project's own, then where users of other agents already keep theirs.
    return [
        user_dir(settings) / "skills",
        cwd / ".m3agent" / "skills",
        cwd / ".claude" / "skills",
        cwd / ".agents" / "skills",
    ]


def command_dirs(settings: Settings, cwd: Path) -> list[Path]:
    return [user_dir(settings) / "commands", cwd / ".m3agent" / "commands"]


def agent_dirs(settings: Settings, cwd: Path) -> list[Path]:
    return [user_dir(settings) / "agents", cwd / ".m3agent" / "agents"]


def host_reader(settings: Settings, cwd: Path) -> HostReader:
    """How this session reads skills, commands, agent and instruction files on the host: under
    its sandbox policy (tools/host_read.py), the user's own directories and AGENTS.md trusted
    (read on their behalf even where m3agent keeps its data)."""
    mine = user_dir(settings)
    trusted = (mine / "skills", mine / "commands", mine / "agents")
    return HostReader(
        sandbox_policy(settings, cwd), trusted=(*trusted, settings.user_instructions_file)
    )


def all_commands(
    settings: Settings, cwd: Path, reader: HostReader | None = None
) -> tuple[tuple[CustomCommand, ...], tuple[str, ...]]:
    """Custom commands, then skills as commands (a command wins a name); none named like a
    built-in command (`builtins_win`)."""
    reader = reader or host_reader(settings, cwd)
    commands, problems = load_commands(command_dirs(settings, cwd), reader)
    skills, skill_problems = discover_skills(skill_roots(settings, cwd), reader)
    names = {c.name for c in commands}
    extra = tuple(c for c in skill_commands(skills) if c.name not in names)
    kept, shadowed = builtins_win(commands + extra)
    return kept, problems + skill_problems + shadowed


def builtins_win(
    commands: tuple[CustomCommand, ...],
) -> tuple[tuple[CustomCommand, ...], tuple[str, ...]]:
    """(the commands not named like a built-in one, a line for each that is): `/undo` is
    always the built-in, whatever a repository's `.m3agent/commands/undo.md` says."""
    builtin = {n.lower() for n in NAMES}
    kept = tuple(c for c in commands if c.name.lower() not in builtin)
    lines = tuple(
        f"{c.source}: /{c.name} is a built-in command; this one is not used"
        for c in commands
        if c.name.lower() in builtin
    )
    return kept, lines


def granted_tools(session: object, command: CustomCommand) -> tuple[str, ...]:
    """The tools a command's `allowed-tools` lets run unasked in its turn. A file of the
    repository grants them only while this user trusts that file as it is (the same trust as
    the project's permission files: app/prefix_rules.py, `/permissions trust`); the user's own
    command files grant them as written."""
    extras = extras_of(session)
    if not command.allowed_tools or extras is None or not command.source:
        return ()
    # Where it was found, not where it leads: a repository's command that is a symlink to a
    # file outside is still the repository's.
    source = Path(os.path.abspath(command.source))
    if not source.is_relative_to(os.path.abspath(extras.project)):
        return command.allowed_tools
    if extras.home is not None and trusted_file(extras.home, source, extras.project):
        return command.allowed_tools
    return ()


def refusal(gate: ApprovalGate, command: CustomCommand) -> str | None:
    """Why a command may not run, or None: an MCP prompt reaches its server, so the
    session's gate judges it as it judges that server's tools (a server deny, plan mode)."""
    if not command.source.startswith("mcp:"):
        return None
    server = command.source.removeprefix("mcp:")
    check = gate.check(
        command.name,
        Touches(opaque=True, server=server),
        mutates=False,
        capability=Capability.MCP,
    )
    return f"/{command.name}: not run: {check.reason}" if check.verdict is Verdict.DENY else None


def expand_turn(session: Session, turn: UserTurn) -> UserTurn:
    """A UserTurn whose text is `/name args` of the session's custom commands, skills or MCP
    prompts, as its prompt and allowed tools; any other turn as it is. ValueError: a command
    that may not run (`refusal`)."""
    if not turn.text.lstrip().startswith("/"):
        return turn
    hit = find(commands_of(session), turn.text)
    if hit is None:
        return turn
    command, args = hit
    if (why := refusal(session.gate, command)) is not None:
        raise ValueError(why)
    return replace(turn, text=command.expand(args), allowed_tools=granted_tools(session, command))


@dataclass(slots=True)
class Extras:
    """What session_extras adds to one session. The factory passes it to the Session it builds,
    which keeps it as `extensions` for as long as it lives (commands_of, granted_tools)."""

    toolset: ExtendedToolset
    config: AgentConfig
    hooks: Hooks | None = None
    notes: list[Error] = field(default_factory=list)
    commands: tuple[CustomCommand, ...] = ()
    task_tool: TaskTool | None = None
    project: Path = Path(".")  # the workspace: command files under it are the repository's
    home: Path | None = None  # where this user's trust is kept (app/prefix_rules.py)

    def bind(self, session: Session) -> None:
        """The task tool runs its children beside `session`, the one built with these extras."""
        if self.task_tool is not None:
            self.task_tool.bind(session)


@runtime_checkable
class _Extended(Protocol):
    """A session that keeps what its front end added: agent.session.Session. Front ends may
    hold a stand-in without it (the TUI's SessionLike)."""

    extensions: object | None


def extras_of(session: object) -> Extras | None:
    """The extras the factory built `session` with; None for a session built otherwise (a
    test's, a subagent's)."""
    extensions = session.extensions if isinstance(session, _Extended) else None
    return extensions if isinstance(extensions, Extras) else None


def commands_of(session: object) -> tuple[CustomCommand, ...]:
    """The `/` commands of a session the factory built (custom commands, skills, MCP prompts);
    none for a session built otherwise (a test's, a subagent's)."""
    extras = extras_of(session)
    return extras.commands if extras is not None else ()


def session_extras(
    settings: Settings,
    cwd: Path,
    engine: Engine,
    toolset: ToolsetProtocol,
    config: AgentConfig,
    sandbox: Sandbox | None = None,
) -> Extras:
    """SANDBOX: the session's, where the project's hooks run. The Extras go to the Session
    the factory builds next (its `extensions`)."""
    notes: list[Error] = []
    try:
        hooks, hook_notes = session_hooks(settings, cwd, sandbox)
    except ValueError as e:  # a broken settings file: no hooks, said at start
        hooks, hook_notes = None, [str(e)]
    notes += [Error(message=n, kind=ErrorKind.HOOK) for n in hook_notes]
    reader = host_reader(settings, cwd)
    skills, problems = discover_skills(skill_roots(settings, cwd), reader)
    commands, cmd_problems = all_commands(settings, cwd, reader)
    from .mcp.prompts import prompt_commands  # the MCP side of app (app/mcp): loaded when used

    prompts, shadowed = builtins_win(prompt_commands(toolset))
    commands += prompts  # after ours: a command file wins a name
    cmd_problems += shadowed
    agents, agent_problems = load_agents(agent_dirs(settings, cwd), reader)
    notes += [
        Error(message=p, kind=ErrorKind.USAGE) for p in (*problems, *cmd_problems, *agent_problems)
    ]
    task = TaskTool(agents)
    extra: list[Any] = [UpdatePlan(), task]
    if skills:
        extra.insert(0, SkillTool(skills, reader))
    names = {s["function"]["name"] for s in toolset.schemas()}
    extra = [t for t in extra if t.name not in names]
    sections = [s for s in (skills_listing(skills), task.listing()) if s]
    if sections:
        config = replace(config, system_prompt="\n\n".join([config.system_prompt, *sections]))
    return Extras(
        toolset=ExtendedToolset(toolset, extra),
        config=config,
        hooks=hooks,
        notes=notes,
        commands=commands,
        task_tool=task,
        project=cwd,
        home=settings.home,
    )
