"""Issue 36, class 4: Claude Code's MCP rule names and plan mode stop a real server's tools
and its resources. Each turn calls a tool and reads the resource it links to, under one rule
or mode set on the session's gate; the first turn, with none, is the control: both get
through. (Before: `mcp__*` matched no tool, a server deny let mcp_read_resource through, and
plan mode, a `mcp__*` deny, stopped neither.)"""

from __future__ import annotations

import asyncio

from m3agent.agent import events as ev
from m3agent.agent import ops
from m3agent.agent.config import ToolRule
from m3agent.app.settings import load_settings
from mcp_support import answer, calls, invoke

TURNS = [  # (rules, mode)
    ((), "default"),  # the control
    ((ToolRule("mcp__*", "deny"),), "default"),  # --disallowed-tools 'mcp__*'
    ((ToolRule("mcp__demo", "deny"),), "default"),  # a server-level deny
    ((ToolRule("mcp__demo__*", "deny"),), "default"),
    ((), "plan"),  # --permission-mode plan, or shift+Tab
]


def test_mcp_rules_and_plan_mode_cover_tools_and_resources(
    home, repo, server, user_config, stdio_config, open_session
):
    user_config('approval = "never"\n' + stdio_config("demo", server))
    one = calls(
        invoke("mcp__demo__add", a=2, b=3),
        invoke("mcp_read_resource", server="demo", uri="mem://report"),
    )
    script = [x for _ in TURNS for x in (one, answer("done"))]
    session = open_session(load_settings(), repo, script)

    async def go():
        results = []
        stream = session.events()
        try:
            for rules, mode in TURNS:
                session.gate.rules = rules
                session.gate.set_mode(mode)
                session.submit(ops.UserTurn("go"))
                got = []
                async for e in stream:
                    if isinstance(e, ev.ToolCallFinished):
                        got.append(e)
                    if isinstance(e, ev.TurnComplete):
                        break
                results.append(got)
        finally:
            await session.close()
        return results

    (control_add, control_read), *guarded = asyncio.run(go())
    assert control_add.output.startswith("5") and "the full report text" in control_read.output
    for (rules, mode), got in zip(TURNS[1:], guarded, strict=True):
        for r in got:
            assert r.is_error and r.metadata.get("denied"), (rules, mode, r.name, r.output)
            assert "the full report text" not in r.output
