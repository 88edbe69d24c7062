"""What issue 23 adds to a session, in one place: hooks (trust applied), skills (listed in
the system block, loaded by the `skill` tool), `update_plan`, custom commands, and the `task`
tool with its agent definitions. The factory calls `session_extras` once; front ends read
`commands_of(session)` for their `/` menu.

Everything here is decided when the session starts: the tool list and the system block
open the prompt, so they never change afterwards (prefix caching).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from m3agent.agent.config import AgentConfig
from m3agent.agent.events import Error, ErrorKind

from .custom_commands import CustomCommand, load_commands, skill_commands

if TYPE_CHECKING:
    from m3agent.agent.hooks import Hooks
    from m3agent.agent.ops import UserTurn
    from m3agent.agent.session import Session
    from m3agent.agent.subagents import TaskTool
    from m3agent.engine.api import Engine
    from m3agent.tools.extra_toolset import ExtendedToolset
    from m3agent.tools.host_read import HostReader
    from m3agent.tools.toolset import ToolsetProtocol

    from .settings import Settings

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


def skill_roots(settings: Settings, cwd: Path) -> list[Path]:
    # The project's own first, then where users of other agents already keep theirs.
    return [
        cwd / ".m3agent" / "skills",
        cwd / ".claude" / "skills",
        cwd / ".agents" / "skills",
        user_dir(settings) / "skills",
    ]


def command_dirs(settings: Settings, cwd: Path) -> list[Path]:
    return [cwd / ".m3agent" / "commands", user_dir(settings) / "commands"]


def agent_dirs(settings: Settings, cwd: Path) -> list[Path]:
    return [cwd / ".m3agent" / "agents", user_dir(settings) / "agents"]


def host_reader(settings: Settings, cwd: Path) -> HostReader:
    """How this session reads skills, commands, agent and instruction files on the host: under
    its sandbox policy (tools/host_read.py), the user's own directories and AGENTS.md trusted
    (read on their behalf even where m3agent keeps its data)."""
    from m3agent.tools.host_read import HostReader

    from .factory import sandbox_policy

    mine = user_dir(settings)
    trusted = (mine / "skills", mine / "commands", mine / "agents")
    return HostReader(
        sandbox_policy(settings, cwd), trusted=(*trusted, settings.user_instructions_file)
    )


def all_commands(
    settings: Settings, cwd: Path, reader: HostReader | None = None
) -> tuple[tuple[CustomCommand, ...], tuple[str, ...]]:
    """Custom commands, then skills as commands (a command wins a name)."""
    from m3agent.tools.skills import discover_skills

    reader = reader or host_reader(settings, cwd)
    commands, problems = load_commands(command_dirs(settings, cwd), reader)
    skills, skill_problems = discover_skills(skill_roots(settings, cwd), reader)
    names = {c.name for c in commands}
    extra = tuple(c for c in skill_commands(skills) if c.name not in names)
    return commands + extra, problems + skill_problems


def expand_turn(session: Session, turn: UserTurn) -> UserTurn:
    """A UserTurn whose text is `/name args` of the session's custom commands, skills or MCP
    prompts, as its prompt and allowed tools; any other turn as it is."""
    from .custom_commands import find

    if not turn.text.lstrip().startswith("/"):
        return turn
    hit = find(commands_of(session), turn.text)
    if hit is None:
        return turn
    command, args = hit
    return replace(turn, text=command.expand(args), allowed_tools=command.allowed_tools)


@dataclass(slots=True)
class Extras:
    toolset: ExtendedToolset
    config: AgentConfig
    hooks: Hooks | None = None
    notes: list[Error] = field(default_factory=list)
    commands: tuple[CustomCommand, ...] = ()
    task_tool: TaskTool | None = None

    def bind(self, session: Session) -> None:
        """The extras of `session` from now on (commands_of); the task tool runs children
        beside the session it belongs to."""
        _BOUND[session] = self
        if self.task_tool is not None:
            self.task_tool.bind(session)


# Each session's extras, held no longer than the session itself.
_BOUND: weakref.WeakKeyDictionary[object, Extras] = weakref.WeakKeyDictionary()


def commands_of(session: object) -> tuple[CustomCommand, ...]:
    """The `/` commands of a session the factory built (custom commands, skills, MCP prompts);
    none for a session built otherwise (a test's, a subagent's)."""
    extras = _BOUND.get(session) if session is not None else None
    return extras.commands if extras is not None else ()


def session_extras(
    settings: Settings, cwd: Path, engine: Engine, toolset: ToolsetProtocol, config: AgentConfig
) -> Extras:
    from m3agent.agent.subagents import TaskTool, load_agents
    from m3agent.tools.extra_toolset import ExtendedToolset
    from m3agent.tools.skills import SkillTool, discover_skills, skills_listing
    from m3agent.tools.update_plan import UpdatePlan

    from .hooks_settings import session_hooks

    notes: list[Error] = []
    try:
        hooks, hook_notes = session_hooks(settings, cwd)
    except ValueError as e:  # a broken settings file: no hooks, said at start
        hooks, hook_notes = None, [str(e)]
    notes += [Error(message=n, kind=ErrorKind.HOOK) for n in hook_notes]
    reader = host_reader(settings, cwd)
    skills, problems = discover_skills(skill_roots(settings, cwd), reader)
    commands, cmd_problems = all_commands(settings, cwd, reader)
    from .mcp.prompts import prompt_commands

    commands += prompt_commands(toolset)  # after ours: a command file wins a name
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
    )
