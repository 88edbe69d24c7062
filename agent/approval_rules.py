"""Which tool rules cover a call, and the verdict they give (the approval gate's rule matching,
agent/approvals.py; what the gate then decides is its own).

A rule names a tool, "*", a glob, or an MCP server in Claude Code's forms (`mcp__SERVER`,
`mcp__SERVER__*`, `mcp__*`: every tool of the server and its resources, whichever tool reaches
it; `mcp__SERVER__TOOL`: one tool), optionally with a path pattern: `edit_file(src/**)`,
Claude Code's `Edit(src/**)` (agent/path_rules.py: workspace-relative only, symlinks resolved;
a path rule covers every tool of its tool's capability, tools/base.py: Capability). Rules are
matched through what a call does, not how it is named: the tool's Capability and the server
its Touches name. When several rules match, deny wins, then ask. A deny or ask path rule about
reading also hides the files it covers from searches over a directory above them (`hides`:
grep, glob, list_dir leave them out).
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

from m3agent.tools.base import Capability, Touches
from m3agent.tools.claude_names import with_same_capability

from .config import ToolRule, Verdict
from .path_rules import PathRule, read_tools, rule_covers, write_tools

_STRENGTH = {Verdict.ALLOW: 0, Verdict.ASK: 1, Verdict.DENY: 2}
MCP_PREFIX = "mcp__"
# A server no call names (its arguments did not parse): a deny or ask rule about any server
# covers it, an allow rule none.
_UNKNOWN_SERVER = "\x00unknown"

# Each rule with its parsed form (agent/path_rules.py: parse_rule), as the gate holds them.
ParsedRules = tuple[tuple[ToolRule, PathRule], ...]


def call_server(tool_name: str, touches: Touches | None, capability: Capability) -> str | None:
    """The MCP server a call reaches: what it declares, else the one its name says
    (`mcp__SERVER__TOOL`); a call of the MCP capability that says neither reaches an
    unknown one. None: the call reaches no server."""
    if touches is not None and touches.server is not None:
        return touches.server
    if tool_name.startswith(MCP_PREFIX):
        return tool_name[len(MCP_PREFIX) :].partition("__")[0]
    return _UNKNOWN_SERVER if capability is Capability.MCP else None


def rule_matches(rule: str, tool_name: str, server: str | None = None) -> bool:
    """Whether a rule's tool part covers a call of `tool_name` reaching `server` (None: no
    MCP server): the name, "*", a glob over names, or a server rule (`mcp__SERVER`,
    `mcp__SERVER__*`, SERVER a name or glob) for any call reaching that server."""
    if rule in (tool_name, "*"):
        return True
    if any(c in rule for c in "*?[") and fnmatchcase(tool_name, rule):
        return True
    if server is None or not rule.startswith(MCP_PREFIX):
        return False
    srv, sep, tool = rule[len(MCP_PREFIX) :].partition("__")
    if server == _UNKNOWN_SERVER:
        return not sep or tool == "*"
    return fnmatchcase(server, srv) and (not sep or tool == "*")


def rule_verdict(
    tool_name: str,
    rules: ParsedRules,
    touches: Touches | None,
    workspace: Path | None,
    confine: bool = True,
    server: str | None = None,
) -> tuple[Verdict, ToolRule] | None:
    """The strongest verdict of the rules that cover this call, with the rule that gave it."""
    paths = None if touches is None or touches.opaque else (*touches.reads, *touches.writes)
    matching = []
    for rule, parsed in rules:
        verdict = Verdict(rule.action)
        allow = verdict is Verdict.ALLOW
        named = server if not (allow and server == _UNKNOWN_SERVER) else None
        tools = covered_tools(parsed, allow)
        if not any(rule_matches(t, tool_name, named) for t in tools):
            continue
        if rule_covers(parsed, paths, workspace, allow=allow, confine=confine):
            matching.append((verdict, rule))
    if not matching:
        return None
    return max(matching, key=lambda m: _STRENGTH[m[0]])


def covered_tools(parsed: PathRule, allow: bool) -> tuple[str, ...]:
    """The tools a rule covers, through the capability table (tools/claude_names.py): a deny
    or ask rule, and an allow rule about paths, cover every built-in tool that does what the
    named one does (`deny read_file` stops grep too; `Read(secrets/**)` is about those files
    whichever tool reads them). A whole-tool allow names only its tools: an "always allow
    write_file" answer never lets edit_file run unasked. A deny or ask path rule about reading
    also covers the tools that change files: each reads the file it changes and shows it (the
    diff of an edit or an overwrite)."""
    if allow and parsed.pattern is None:
        return parsed.tools
    tools = with_same_capability(parsed.tools)
    if not allow and parsed.pattern is not None and any(t in read_tools() for t in tools):
        tools = (*tools, *(t for t in write_tools() if t not in tools))
    return tools


def hides(rules: ParsedRules, path: str, workspace: Path | None, confine: bool = True) -> bool:
    """Whether a deny or ask rule about reading covers `path` (absolute, or relative to the
    workspace)."""
    for rule, parsed in rules:
        if rule.action == Verdict.ALLOW or parsed.pattern is None:
            continue
        if not any(t in read_tools() for t in covered_tools(parsed, allow=False)):
            continue
        if rule_covers(parsed, (path,), workspace, allow=False, confine=confine):
            return True
    return False


def strongest(verdicts: list[Verdict]) -> Verdict | None:
    """Deny over ask over allow; None when nothing was said."""
    return max(verdicts, key=lambda a: _STRENGTH[a]) if verdicts else None
