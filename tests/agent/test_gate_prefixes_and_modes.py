"""The approval gate itself: an allowed shell prefix answers where it would ask (never over a
deny), an ask offers the prefix the user may accept, and the permission mode is one enum set
through one operation. The front ends' agreement is tests/app/test_gate_decides.py's."""

from __future__ import annotations

import pytest
from m3agent.agent.approvals import ApprovalGate
from m3agent.agent.config import PermissionMode, ToolRule, Verdict
from m3agent.agent.shell_prefixes import ShellPrefixes
from m3agent.tools.base import Capability

EXEC = {"mutates": True, "capability": Capability.EXEC}


def shell(gate: ApprovalGate, command: str):
    return gate.check("shell", arguments={"command": command}, **EXEC)


def test_a_saved_prefix_answers_the_question_and_only_for_its_commands(tmp_path):
    saved: list[tuple[str, ...]] = []
    gate = ApprovalGate("untrusted", prefixes=ShellPrefixes([("git", "status")], saved.append))
    allowed = shell(gate, "git status -s")
    assert (allowed.verdict, allowed.prefix) == (Verdict.ALLOW, ("git", "status"))
    assert allowed.reason == "allowed: git status …"
    # git's option that writes elsewhere: no prefix, so nothing to offer either
    risky = shell(gate, "git status --output=/tmp/x")
    assert (risky.verdict, risky.amendment) == (Verdict.ASK, None)
    asked = shell(gate, "timeout 5 pytest -q")  # a wrapper: its prefix names what it runs
    assert (asked.verdict, asked.amendment) == (Verdict.ASK, ("timeout", "5", "pytest"))
    assert gate.allow_prefix(asked.amendment, save=True) is None
    assert shell(gate, "timeout 5 pytest tests").verdict is Verdict.ALLOW
    assert saved == [("timeout", "5", "pytest")]


def test_a_prefix_never_lifts_a_deny_rule_or_plan_mode():
    gate = ApprovalGate(
        "untrusted", (ToolRule("shell", "deny"),), prefixes=ShellPrefixes([("echo",)])
    )
    assert shell(gate, "echo hi").verdict is Verdict.DENY
    gate = ApprovalGate("untrusted", prefixes=ShellPrefixes([("echo",)]))
    gate.set_mode("plan")
    assert shell(gate, "echo hi").verdict is Verdict.DENY


def test_a_prefix_that_cannot_be_saved_still_holds_for_the_session():
    def refuse(prefix: tuple[str, ...]) -> None:
        raise OSError("read-only home")

    gate = ApprovalGate("untrusted", prefixes=ShellPrefixes(persist=refuse))
    assert gate.allow_prefix(("make", "all"), save=True) == "read-only home"
    assert shell(gate, "make all -j4").verdict is Verdict.ALLOW


def test_the_permission_mode_is_one_enum_set_through_the_gate():
    gate = ApprovalGate("on-request")
    assert gate.mode is PermissionMode.DEFAULT
    assert gate.set_mode("acceptEdits") is PermissionMode.ACCEPT_EDITS
    write = gate.check("write_file", mutates=True, capability=Capability.WRITE)
    assert write.verdict is Verdict.ALLOW
    with pytest.raises(
        ValueError, match="use one of default, acceptEdits, plan, bypassPermissions"
    ):
        gate.set_mode("yolo")
    assert gate.mode is PermissionMode.ACCEPT_EDITS  # a refused change changes nothing
