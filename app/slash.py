"""Slash commands typed in the prompt: the built-in list (for /help, the `/` menu, and the
names no custom command may take: extensions.builtins_win), parsed here, executed by the
TUI's slash_actions."""

from __future__ import annotations

from dataclasses import dataclass

from m3agent.engine.api import THINKING_MODES, ThinkingMode

# The everyday commands (slash_daily.py runs them): (name, args, help).
DAILY_COMMANDS = (
    ("clear", "", "start a new session (the old one stays resumable; Claude Code's)"),
    ("new", "", "start a new session (Codex's name for /clear)"),
    ("status", "", "session, workspace, engine, modes, sandbox and context"),
    ("cost", "", "tokens of this session: prompt, cached, generated, time"),
    ("usage", "", "same as /cost"),
    ("init", "", "ask the model to write AGENTS.md for this repository"),
    (
        "permissions",
        "[trust | allow|ask|deny|remove RULE]",
        "approval rules and saved prefixes; RULE: edit_file(src/**); trust: the project's",
    ),
    ("exit", "", "leave (same as /quit)"),
    ("memory", "[edit|user]", "the instruction files read; edit opens ./AGENTS.md in $EDITOR"),
    ("tasks", "[ID | stop ID]", "background commands: list, show one's output, stop one"),
    ("ps", "[ID | stop ID]", "same as /tasks"),
)


@dataclass(frozen=True, slots=True)
class SlashSpec:
    name: str
    args: str  # "" when it takes none; shown after the name
    help: str

    @property
    def runs_alone(self) -> bool:
        """Enter in the `/` menu runs it: no argument, or an optional one ("[...]")."""
        return not self.args or self.args.startswith("[")

    @property
    def usage(self) -> str:
        return f"/{self.name} {self.args}".rstrip()


COMMANDS = (
    SlashSpec(
        "think",
        "[enabled|disabled|adaptive]",
        "thinking mode of the next turns; alone, the next mode (like ctrl+t); "
        "/think default MODE also sets the session's mode in the prompt (recomputes it "
        "once)",
    ),
    SlashSpec("attach", "PATH", "attach an image or video to the next prompt (or write @path.png)"),
    SlashSpec("undo", "", "restore the files as they were before the last edit"),
    SlashSpec(
        "rewind",
        "",
        "back to before an earlier prompt: the conversation and the files (also Esc Esc)",
    ),
    SlashSpec("diff", "", "show the uncommitted changes in the workspace (git diff)"),
    SlashSpec(
        "review",
        "[--base BRANCH | --commit SHA] [TEXT]",
        "the model reviews the uncommitted changes (a branch, a commit): findings by file:line",
    ),
    SlashSpec("compact", "", "summarise the conversation to free context"),
    SlashSpec("sessions", "", "browse saved sessions and resume one"),
    SlashSpec(
        "export",
        "[FILE.md | FILE.json | DIR]",
        "write this session as Markdown and JSON (asks before replacing a file)",
    ),
    SlashSpec(
        "fork",
        "",
        "go on in a new session from this conversation (same cached prefix; this one stays)",
    ),
    SlashSpec("context", "", "what the repository snapshot holds, with token counts"),
    SlashSpec(
        "mcp", "[reload [yes]]", "MCP servers: status and tools; reload the config (asks first)"
    ),
    SlashSpec("help", "", "commands and keys"),
    SlashSpec("quit", "", "leave (also ctrl+q, or ctrl+c twice)"),
) + tuple(SlashSpec(*spec) for spec in DAILY_COMMANDS)
NAMES = tuple(c.name for c in COMMANDS)
HELP = {c.usage: c.help for c in COMMANDS}


@dataclass(frozen=True, slots=True)
class SlashCommand:
    name: str
    arg: str = ""


class SlashError(ValueError):
    """A malformed slash command; the message is shown to the user as is."""


def parse_slash(text: str) -> SlashCommand | None:
    """None when the text is an ordinary prompt; raises SlashError on a bad command."""
    stripped = text.strip()
    if not stripped.startswith("/") or stripped.startswith("//"):
        return None
    head, _, arg = stripped[1:].partition(" ")
    name = head.lower()
    if name not in NAMES:
        raise SlashError(f"unknown command /{head}; type /help for the list")
    arg = arg.strip()
    if name == "think" and arg and arg.removeprefix("default ").strip() not in THINKING_MODES:
        raise SlashError("usage: /think [enabled|disabled|adaptive] or /think default MODE")
    if name == "attach" and not arg:
        raise SlashError("usage: /attach PATH")
    return SlashCommand(name, arg)


def menu_matches(text: str, extra: tuple[SlashSpec, ...] = ()) -> list[SlashSpec]:
    """The commands the `/` menu offers for what is typed: names starting with it first, then
    names containing it. Empty once the text is no longer a bare `/word`. `extra`: the
    session's custom commands and skills (app/tui/ext_view.py); one named as a built-in
    command is offered instead of it, as Enter runs it instead (a project's `review.md`)."""
    if not text.startswith("/") or text.startswith("//") or any(c.isspace() for c in text):
        return []
    typed = text[1:].lower()
    custom = {c.name for c in extra}
    known = (*(c for c in COMMANDS if c.name not in custom), *extra)
    first = [c for c in known if c.name.lower().startswith(typed)]
    return first + [c for c in known if typed in c.name.lower() and c not in first]


def next_thinking(mode: str) -> ThinkingMode:
    """ctrl+t order: adaptive -> enabled -> disabled -> adaptive."""
    order = (ThinkingMode.ADAPTIVE, ThinkingMode.ENABLED, ThinkingMode.DISABLED)
    return order[(order.index(mode) + 1) % len(order)] if mode in order else ThinkingMode.ADAPTIVE
