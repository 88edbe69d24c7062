"""Skills: directories holding a SKILL.md (name and description in its frontmatter).

Only the name and description open the session (listed in the system block, fixed at start);
the body reaches the model when it calls the `skill` tool, as a tool result at the end of the
prompt, so loading a skill never rewrites anything the prefix cache holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from .base import Tool, ToolContext, ToolResult, Touches
from .frontmatter import COMMAND_NAME, definition_files, parse, read_named
from .host_read import HostReader, ReadRefused

_MAX_FILES_LISTED = 50


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    path: Path  # the SKILL.md


def discover_skills(
    roots: Iterable[Path], reader: HostReader
) -> tuple[tuple[Skill, ...], tuple[str, ...]]:
    """(skills, problems) from each root's <dir>/SKILL.md, read under the host read policy
    (`reader`); an earlier root wins a name."""
    found: dict[str, Skill] = {}
    problems: list[str] = []
    for _, skill_md in definition_files(roots, "*/SKILL.md"):
        got = read_named(skill_md, skill_md.parent.name, COMMAND_NAME, reader)
        if isinstance(got, str):
            why = got or "needs a name and a description in its frontmatter"
            problems.append(f"{skill_md}: {why}")
            continue
        _, name, desc = got
        found.setdefault(name, Skill(name, desc, skill_md))
    return tuple(found.values()), tuple(problems)


def skills_listing(skills: Iterable[Skill]) -> str:
    """The system block's section: names and descriptions only."""
    rows = [f"- {s.name}: {s.description}" for s in skills]
    if not rows:
        return ""
    return (
        "Skills: instructions you load when a task needs them, by calling the skill tool "
        "with the skill's name.\n" + "\n".join(rows)
    )


class SkillArgs(BaseModel):
    skill: str = Field(description="The skill's name, as listed.")


class SkillTool(Tool[SkillArgs]):
    name = "skill"
    kind = "read"
    description = (
        "Load a skill's full instructions by name (the skills are listed in the system "
        "prompt). Returns its SKILL.md and the files beside it."
    )

    def __init__(self, skills: Iterable[Skill], reader: HostReader) -> None:
        self._skills = {s.name: s for s in skills}
        self._reader = reader

    def touches(self, args: SkillArgs) -> Touches:
        # Only files discovered at start are read (never a path the model names).
        return Touches()

    def run(self, args: SkillArgs, ctx: ToolContext) -> ToolResult:
        name = args.skill
        skill = self._skills.get(name)
        if skill is None:
            known = ", ".join(self._skills) or "none"
            return ToolResult(f"no skill named {name!r} (skills: {known})", is_error=True)
        try:  # read again now, under the same policy: the file may have changed since start
            doc = parse(self._reader.read_text(skill.path))
        except ReadRefused as e:
            return ToolResult(f"skill {name!r}: {e}", is_error=True)
        folder = skill.path.parent
        others = sorted(
            str(p.relative_to(folder)) for p in folder.rglob("*") if self._listed(p, skill.path)
        )[:_MAX_FILES_LISTED]
        files = "\n".join(f"- {folder / o}" for o in others)
        tail = (
            f"\n\nFiles of this skill (read them when the instructions say):\n{files}"
            if files
            else ""
        )
        return ToolResult(
            f"# Skill: {skill.name}\n(from {folder})\n\n{doc.body.strip()}{tail}",
            metadata={"skill": skill.name},
        )

    def _listed(self, path: Path, skill_md: Path) -> bool:
        """A file beside SKILL.md worth naming: a regular file the host read policy allows
        (a link planted to a secret is not even named)."""
        if path == skill_md or not path.is_file():
            return False
        try:
            self._reader.check(path)
        except ReadRefused:
            return False
        return True
