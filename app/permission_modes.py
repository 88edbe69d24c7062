"""Permission modes, with Claude Code's names: default, acceptEdits, plan, bypassPermissions
(`--permission-mode`; shift+Tab in the TUI cycles the first three).

The mode is the session's approval gate's (agent/approvals.py: ApprovalGate.set_mode), whoever
sets it, so it binds every call the gate judges, a `task` child's included: plan mode denies
every tool that writes, runs commands or reaches an MCP server (by what the tool does, its
Capability, not by its name); acceptEdits allows file changes as an allow rule would. A mode
switch changes no byte of the prompt already sent: the tool schemas stay, and plan mode's
instruction rides on the user's own message at the end of the conversation, as the thinking
mode rides on the generation prefix.
"""

from __future__ import annotations

from m3agent.agent import mode_rules
from m3agent.agent.config import PermissionMode, ToolRule
from m3agent.agent.path_rules import parse_rule

M = PermissionMode
CYCLE = (M.DEFAULT, M.ACCEPT_EDITS, M.PLAN)  # shift+Tab, as Claude Code
SHOWN = {M.DEFAULT: "", M.ACCEPT_EDITS: "accept edits", M.PLAN: "plan", M.BYPASS_PERMISSIONS: ""}

PLAN_INSTRUCTION = (
    "\n\n<plan_mode>Plan mode is on: tools that change files or run commands are denied. "
    "Read what you need with the read-only tools, then answer with a numbered plan of the "
    "changes (files, what changes in each, how to check it) and stop; do not make them yet."
    "</plan_mode>"
)
GO_AHEAD = "The plan is approved. Carry it out now, then check the result."


def check_mode(mode: str) -> PermissionMode:
    """The mode a flag names; a ValueError listing the names (the gate's own check)."""
    return mode_rules.check_mode(mode)


def tool_flag_rules(allowed: list[str], disallowed: list[str]) -> tuple[ToolRule, ...]:
    """--allowed-tools / --disallowed-tools (comma- or space-separated names, globs, or path
    rules: `edit_file(src/**)`, Claude Code's `Edit(src/**)`); a bad rule is a ValueError now,
    before anything is built."""

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


def next_mode(mode: str) -> PermissionMode:
    return CYCLE[(CYCLE.index(M(mode)) + 1) % len(CYCLE)] if mode in CYCLE else CYCLE[0]


def plan_text(text: str, mode: str) -> str:
    return text + PLAN_INSTRUCTION if mode == M.PLAN else text
