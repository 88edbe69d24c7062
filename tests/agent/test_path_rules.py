"""Per-path approval rules (issue 22): `edit_file(src/**)`, Claude Code's `Edit(src/**)`.
Attacks first, each with its control (the same attempt with the checks off succeeds): a rule
with `..`, an absolute rule, a symlink out of the workspace, a project file that allows paths
outside the repository. Then what the rules are for: allow under src, deny under secrets."""

from __future__ import annotations

import json
import os

import pytest
from m3agent.agent.approvals import ApprovalGate
from m3agent.agent.config import ToolRule, Verdict
from m3agent.agent.path_rules import RuleError, parse_rule
from m3agent.tools.base import Touches


def _edit(path: str) -> Touches:
    return Touches(reads=(path,), writes=(path,))


def _gate(ws, *rules: tuple[str, str], confine: bool = True) -> ApprovalGate:
    return ApprovalGate(
        "untrusted", tuple(ToolRule(r, a) for r, a in rules), workspace=ws, confine=confine
    )


def _verdict(gate: ApprovalGate, path: str, tool: str = "edit_file") -> Verdict:
    return gate.check(tool, _edit(path), mutates=True).verdict


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "secrets").mkdir()
    (root / "src" / "app.py").write_text("x = 1\n")
    (tmp_path / "outside").mkdir()
    return root


@pytest.mark.parametrize(
    "rule", ["edit_file(../outside/**)", "edit_file(../*/x.py)", "edit_file(src/../../outside/*)"]
)
def test_a_rule_with_dotdot_is_refused(ws, rule):
    with pytest.raises(RuleError, match="outside the workspace"):
        _gate(ws, (rule, "allow"))
    if not rule.startswith("edit_file(src"):  # control: unchecked, it allows an edit outside
        loose = _gate(ws, (rule, "allow"), confine=False)
        assert _verdict(loose, "../outside/x.py") is Verdict.ALLOW


@pytest.mark.parametrize("rule", ["edit_file(/etc/**)", "Edit(~/.ssh/*)", "Write(C:/x/*)"])
def test_an_absolute_rule_is_refused(ws, rule):
    with pytest.raises(RuleError, match="relative to the workspace"):
        parse_rule(rule)
    if rule.startswith("edit_file"):  # control: unchecked, it matches /etc/passwd
        assert _verdict(_gate(ws, (rule, "allow"), confine=False), "/etc/passwd") is Verdict.ALLOW


def test_a_symlink_out_of_the_workspace_is_not_allowed(ws, tmp_path):
    os.symlink(tmp_path / "outside", ws / "src" / "link")
    gate = _gate(ws, ("edit_file(src/**)", "allow"))
    assert _verdict(gate, "src/link/evil.py") is Verdict.ASK  # the policy decides: it asks
    assert _verdict(gate, "src/app.py") is Verdict.ALLOW
    # Control: the path as written matches src/**; unchecked, it would run without asking.
    loose = _gate(ws, ("edit_file(src/**)", "allow"), confine=False)
    assert _verdict(loose, "src/link/evil.py") is Verdict.ALLOW


def test_a_symlink_into_a_denied_tree_is_denied(ws):
    os.symlink(ws / "secrets", ws / "src" / "keys")
    gate = _gate(ws, ("edit_file(src/**)", "allow"), ("edit_file(secrets/**)", "deny"))
    assert _verdict(gate, "src/keys/api.txt") is Verdict.DENY  # resolved: secrets/api.txt
    assert _verdict(gate, "secrets/api.txt") is Verdict.DENY
    assert _verdict(gate, str(ws / "secrets" / "x")) is Verdict.DENY  # absolute, inside


def test_a_project_file_cannot_allow_paths_outside_the_repo(ws, tmp_path):
    from m3agent.app.prefix_rules import PROJECT_SETTINGS, project_rules, trust_project

    home = tmp_path / "home"
    home.mkdir()
    rules = ["edit_file(../outside/**)", "Edit(/home/**)", "edit_file(src/**)"]
    (ws / PROJECT_SETTINGS).parent.mkdir()
    (ws / PROJECT_SETTINGS).write_text(json.dumps({"permissions": {"allow": rules}}))
    found, notes = project_rules(home, ws)
    assert found == [] and "is not trusted" in notes[0]  # nothing counts before trust
    trust_project(home, ws)
    found, notes = project_rules(home, ws)
    assert [r.tool for r in found] == ["edit_file(src/**)"]
    assert len(notes) == 2 and all("refused" in n for n in notes)
    # Control: the refused rules, taken unchecked, would allow those edits.
    loose = _gate(ws, *((r, "allow") for r in rules[:2]), confine=False)
    assert _verdict(loose, "../outside/x.py") is Verdict.ALLOW
    assert _verdict(loose, "/home/u/.bashrc") is Verdict.ALLOW
    # An edited file is untrusted again.
    (ws / PROJECT_SETTINGS).write_text(json.dumps({"permissions": {"allow": ["**"]}}))
    assert project_rules(home, ws)[0] == []


def test_allow_under_src_deny_under_secrets_and_claude_names(ws):
    gate = _gate(ws, ("Edit(src/**)", "allow"), ("edit_file(secrets/**)", "deny"))
    assert _verdict(gate, "src/app.py") is Verdict.ALLOW
    assert _verdict(gate, "src/deep/new.py", "write_file") is Verdict.ALLOW  # Edit covers it
    assert _verdict(gate, "README.md") is Verdict.ASK  # no rule: the policy (untrusted) asks
    assert _verdict(gate, "secrets/k") is Verdict.DENY
    # A call naming several paths is allowed only when all of them are covered.
    both = Touches(writes=("src/a.py", "README.md"))
    assert gate.check("apply_patch", both, mutates=True).verdict is Verdict.ASK
    # Unknown paths (arguments that did not parse): deny fails closed, allow does not apply.
    deny = _gate(ws, ("edit_file(secrets/**)", "deny"))
    assert deny.check("edit_file", None, mutates=True).verdict is Verdict.DENY
    allow = _gate(ws, ("edit_file(src/**)", "allow"))
    assert allow.check("edit_file", None, mutates=True).verdict is Verdict.ASK


def test_patterns_and_bad_rules():
    from m3agent.agent.path_rules import _compile

    assert _compile("src/**").fullmatch("src/a/b.py") and _compile("src/**").fullmatch("src")
    assert not _compile("src/*").fullmatch("src/a/b.py")
    assert _compile("**/*.md").fullmatch("README.md") and _compile("**/*.md").fullmatch("d/x.md")
    for bad in ["edit_file()", "edit_file(src", "shell(src/**)", "Bash(npm test:*)"]:
        with pytest.raises(RuleError):
            parse_rule(bad)
