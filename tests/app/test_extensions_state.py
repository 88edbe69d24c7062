"""Each session keeps its own extensions (app/extensions.py): the factory hands the Extras it
builds to the Session (`Session.extensions`), with no table in the module that two sessions
of one process share."""

from __future__ import annotations

import asyncio
from pathlib import Path

from m3agent.agent.ops import UserTurn
from m3agent.app.extensions import commands_of, expand_turn, extras_of
from m3agent.app.factory import build_session
from m3agent.app.prefix_rules import trust_project
from m3agent.app.settings import load_settings
from m3agent.engine.backends.scripted import ScriptedEngine


def test_two_sessions_in_one_process_keep_separate_extension_state(home: Path, make_repo):
    audit = "---\nallowed-tools: [Bash]\n---\nAudit $1.\n"
    a = make_repo({".m3agent/commands/audit.md": audit}, name="a")
    b = make_repo({".m3agent/commands/ship.md": "Ship it.\n"}, name="b")
    settings = load_settings().override(approval="never", context=False)
    one = build_session(settings, cwd=a, engine=ScriptedEngine([]))
    two = build_session(settings, cwd=b, engine=ScriptedEngine([]))
    try:
        first, second = extras_of(one), extras_of(two)
        assert first is one.extensions and second is two.extensions
        assert first is not None and second is not None and first is not second
        assert first.project == a.resolve() and second.project == b.resolve()
        assert first.task_tool is not second.task_tool
        assert [c.name for c in commands_of(one)] == ["audit"]
        assert [c.name for c in commands_of(two)] == ["ship"]

        assert expand_turn(one, UserTurn("/audit x")).text == "Audit x."
        assert expand_turn(two, UserTurn("/audit x")).text == "/audit x"  # not two's command
        assert expand_turn(two, UserTurn("/ship")).text.strip() == "Ship it."
        # The repository's grant counts once the user trusts that repository, for its session.
        assert expand_turn(one, UserTurn("/audit x")).allowed_tools == ()
        trust_project(home, a)
        assert expand_turn(one, UserTurn("/audit x")).allowed_tools == ("shell",)
    finally:
        asyncio.run(one.close())
        asyncio.run(two.close())


def test_a_session_built_without_the_factory_has_no_commands(tmp_path: Path):
    """A test's or a subagent's session, or a front end's stand-in: no extras, no commands."""
    from m3agent.agent.config import AgentConfig
    from m3agent.agent.session import Session

    session = Session.create(
        ScriptedEngine([]), None, AgentConfig(), sessions_dir=tmp_path / "s", cwd=tmp_path
    )
    try:
        assert session.extensions is None and extras_of(session) is None
        assert (
            commands_of(session) == () and commands_of(object()) == () and commands_of(None) == ()
        )
    finally:
        asyncio.run(session.close())
