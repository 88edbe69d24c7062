"""Agent definitions: `.m3agent/agents/*.md` and `~/.m3agent/agents/*.md`, Claude Code's format.

---
name: reviewer
description: Reviews a diff for bugs. Use after an edit.
tools: read_file, grep, glob      # optional: the tools it may call (default: all but task);
                                  # Claude Code names too (Read, Grep, Glob, Bash, Edit)
max-turns: 8                      # optional (ours): its budget of engine calls
---
You are a careful reviewer ...    # its instructions
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from m3agent.tools.claude_names import resolve_tool_names
from m3agent.tools.frontmatter import AGENT_NAME, definition_files, read_named
from m3agent.tools.host_read import HostReader

DEFAULT_MAX_TURNS = 12


@dataclass(frozen=True, slots=True)
class AgentDef:
    name: str
    description: str
    instructions: str = ""
    tools: tuple[str, ...] | None = None  # None: every tool of the parent except task
    max_turns: int = DEFAULT_MAX_TURNS
    source: str = ""


GENERAL = AgentDef(
    "general-purpose",
    "A general agent for research and multi-step tasks; it has the parent's tools.",
    "Work on the task with the tools, then answer with a short report of what you found "
    "or did: the parent agent sees only that answer.",
)


def load_agents(
    dirs: Sequence[Path], reader: HostReader
) -> tuple[tuple[AgentDef, ...], tuple[str, ...]]:
    """(agents, problems): general-purpose first, then the files (the project's win), each
    read under the host read policy (`reader`)."""
    found: dict[str, AgentDef] = {GENERAL.name: GENERAL}
    problems: list[str] = []
    for _, path in definition_files(dirs, "*.md"):
        got = read_named(path, path.stem, AGENT_NAME, reader)
        if isinstance(got, str):
            why = got or "an agent needs a lowercase name and a description"
            problems.append(f"{path}: {why}")
            continue
        doc, name, desc = got
        turns = doc.text("max-turns") or doc.text("maxTurns")
        try:
            max_turns = int(turns) if turns else DEFAULT_MAX_TURNS
        except ValueError:
            problems.append(f"{path}: max-turns must be a number")
            continue
        tools = resolve_tool_names(doc.names("tools"))  # Claude Code names too
        if name not in found or found[name] is GENERAL:
            found[name] = AgentDef(
                name, desc, doc.body.strip(), tools or None, max(1, max_turns), str(path)
            )
    return tuple(found.values()), tuple(problems)
