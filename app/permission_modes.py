"""Permission modes, with Claude Code's names: default, acceptEdits, plan, bypassPermissions
(`--permission-mode`; shift+Tab in the TUI cycles the first three).

Each mode is tool rules added after the configured ones (deny wins over ask over allow), so a
mode switch changes no byte of the prompt already sent: the tool schemas stay, and plan mode's
instruction rides on the user's own message at the end of the conversation, as the thinking
mode rides on the generation prefix. Plan mode denies every tool that changes something (and
the shell, and MCP tools, which may); the model reads, then answers with a plan.
"""

from __future__ import annotations

from m3agent.agent.config import ToolRule
from m3agent.tools.apply_patch import ApplyPatch
from m3agent.tools.edit_file import EditFile
from m3agent.tools.shell import Shell
from m3agent.tools.write_file import WriteFile

MODES = ("default", "acceptEdits", "plan", "bypassPermissions")
CYCLE = ("default", "acceptEdits", "plan")  # shift+Tab, as Claude Code
EDIT_TOOLS = (EditFile.name, WriteFile.name, ApplyPatch.name)
SHOWN = {"default": "", "acceptEdits": "accept edits", "plan": "plan", "bypassPermissions": ""}

PLAN_INSTRUCTION = (
    "\n\n<plan_mode>Plan mode is on: tools that change files or run commands are denied. "
    "Read what you need with the read-only tools, then answer with a numbered plan of the "
    "changes (files, what changes in each, how to check it) and stop; do not make them yet."
    "</plan_mode>"
)
# How a denial names plan mode: the model (and the user) learn why, and how it ends.
PLAN_SOURCE = "plan mode (read only until the plan is approved)"
GO_AHEAD = "The plan is approved. Carry it out now, then check the result."


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"unknown permission mode {mode!r} (use one of {', '.join(MODES)})")
    return mode


def mode_rules(mode: str) -> tuple[ToolRule, ...]:
    if mode == "plan":
        denied = (*EDIT_TOOLS, Shell.name, "mcp__*")
        return tuple(ToolRule(t, "deny", source=PLAN_SOURCE) for t in denied)
    if mode == "acceptEdits":
        return tuple(ToolRule(t, "allow", source="acceptEdits mode") for t in EDIT_TOOLS)
    return ()


def tool_flag_rules(allowed: list[str], disallowed: list[str]) -> tuple[ToolRule, ...]:
    """--allowed-tools / --disallowed-tools (comma- or space-separated names, globs, or path
    rules: `edit_file(src/**)`, Claude Code's `Edit(src/**)`); a bad rule is a ValueError now,
    before anything is built."""
    from m3agent.agent.path_rules import parse_rule

    def names(values: list[str]) -> list[str]:
        # commas and spaces separate rules, except inside a rule's parentheses
        # (`Edit(docs/my notes/**)`, Claude Code's `Bash(git status:*)`)
        out: list[str] = []
        for v in values:
            word, depth = "", 0
            for ch in v:
                depth += (ch == "(") - (ch == ")") if depth or ch == "(" else 0
                if ch in ", \t" and depth == 0:
                    out += [word] if word else []
                    word = ""
                else:
                    word += ch
            out += [word] if word else []
        return out

    rules = [ToolRule(n, "allow", source="--allowed-tools") for n in names(allowed)]
    rules += [ToolRule(n, "deny", source="--disallowed-tools") for n in names(disallowed)]
    for rule in rules:
        parse_rule(rule.tool)  # RuleError names the rule and why
    return tuple(rules)


def next_mode(mode: str) -> str:
    return CYCLE[(CYCLE.index(mode) + 1) % len(CYCLE)] if mode in CYCLE else CYCLE[0]


def plan_text(text: str, mode: str) -> str:
    return text + PLAN_INSTRUCTION if mode == "plan" else text
