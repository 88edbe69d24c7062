"""Custom slash commands: Markdown files whose body is the prompt (Claude Code's format).

    .m3agent/commands/review.md   ->  /review      (the project's; wins over the user's)
    ~/.m3agent/commands/fix.md    ->  /fix
    .m3agent/commands/git/pr.md   ->  /git:pr

Frontmatter: `description` (shown in the `/` menu), `allowed-tools` (tools that run without an
approval prompt during that turn, named as here or as in Claude Code: `shell` or `Bash`; a
pattern such as `Bash(git diff:*)` grants nothing and is reported, never widened to its tool),
`argument-hint`. In the body `$ARGUMENTS` is everything after the name and `$1`..`$9` its
words; a body with neither gets the arguments appended. Skills (tools/skills.py) appear in the
same menu as `/NAME`: a prompt asking the model to load that skill.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from m3agent.tools.claude_names import resolve_tool_names
from m3agent.tools.frontmatter import COMMAND_NAME, definition_files, parse
from m3agent.tools.host_read import HostReader, ReadRefused
from m3agent.tools.skills import Skill

_POSITIONAL = re.compile(r"\$([1-9])")


@dataclass(frozen=True, slots=True)
class CustomCommand:
    name: str
    description: str
    body: str
    allowed_tools: tuple[str, ...] = ()
    argument_hint: str = ""
    source: str = ""  # the file, "skill:<path>" or "mcp:<server>"
    # An MCP prompt: the server renders it (app/mcp/prompts.py); None for a file's body.
    render: Callable[[str], str] | None = field(default=None, compare=False, repr=False)

    def expand(self, arguments: str) -> str:
        if self.render is not None:
            return self.render(arguments)
        args = arguments.strip()
        try:
            words = shlex.split(args)
        except ValueError:  # an unbalanced quote: plain words
            words = args.split()
        text = self.body
        used = "$ARGUMENTS" in text or _POSITIONAL.search(text) is not None
        text = text.replace("$ARGUMENTS", args)
        text = _POSITIONAL.sub(
            lambda m: words[int(m[1]) - 1] if int(m[1]) <= len(words) else "", text
        )
        if args and not used:
            text = f"{text.rstrip()}\n\n{args}"
        return text.strip()


def _allowed_tools(entries: Iterable[str], path: Path, problems: list[str]) -> tuple[str, ...]:
    """The tools a command's `allowed-tools` lets run unasked, by name in either vocabulary
    (`shell` or `Bash`). An entry with a pattern (`Bash(git diff:*)`, `Edit(src/**)`) asks for
    less than its whole tool: granting the tool would widen it, so it grants nothing here and
    the problem line says so (approval rules and `/permissions` take such patterns)."""
    names: list[str] = []
    for entry in entries:
        if "(" in entry:
            problems.append(
                f"{path}: allowed-tools {entry!r}: patterns are not applied to a command's "
                f"turn; write the tool's name to allow all of it"
            )
            continue
        names.append(entry.strip())
    return resolve_tool_names(names)


def load_commands(
    dirs: Sequence[Path], reader: HostReader
) -> tuple[tuple[CustomCommand, ...], tuple[str, ...]]:
    """(commands, problems); an earlier directory wins a name (the project before the user).
    Each file is read under the host read policy (`reader`): a link to a secret is no prompt."""
    found: dict[str, CustomCommand] = {}
    problems: list[str] = []
    for root, path in definition_files(dirs, "**/*.md"):
        rel = path.relative_to(root).with_suffix("")
        name = ":".join(rel.parts)
        if not COMMAND_NAME.match(name):
            problems.append(f"{path}: {name!r} is not a command name")
            continue
        try:
            doc = parse(reader.read_text(path))
        except ReadRefused as e:
            problems.append(str(e))
            continue
        first = doc.body.strip().splitlines()[0][:80] if doc.body.strip() else ""
        desc = doc.text("description") or first
        found.setdefault(
            name,
            CustomCommand(
                name=name,
                description=desc or f"custom command ({path.name})",
                body=doc.body,
                allowed_tools=_allowed_tools(doc.names("allowed-tools"), path, problems),
                argument_hint=doc.text("argument-hint"),
                source=str(path),
            ),
        )
    return tuple(found.values()), tuple(problems)


def skill_commands(skills: Iterable[Skill]) -> tuple[CustomCommand, ...]:
    """Each skill as a `/NAME` command: the model loads it through the skill tool."""
    body = "Load the skill `{name}` with the skill tool and follow it.\n\n$ARGUMENTS"
    return tuple(
        CustomCommand(
            s.name, f"skill: {s.description}", body.format(name=s.name), source=f"skill:{s.path}"
        )
        for s in skills
    )


def find(commands: Iterable[CustomCommand], text: str) -> tuple[CustomCommand, str] | None:
    """(command, arguments) when `text` is `/name args` of one of them, else None."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    head, _, rest = stripped[1:].partition(" ")
    for c in commands:
        if c.name == head:
            return c, rest
    return None
