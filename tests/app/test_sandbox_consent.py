"""workspace-write without bubblewrap: the metadata gap is accepted once, or the session stops."""

from __future__ import annotations

import pytest
from m3agent.app.sandbox_consent import ConsentRefused, accepted, ensure_consent
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxMode, SandboxPolicy
from m3agent.tools.sandbox.report import probe


def policy(ws, mode=SandboxMode.WORKSPACE_WRITE, *, no_bwrap=True):
    p = SandboxPolicy(workspace=ws, mode=mode)
    return p.with_(disabled_layers=frozenset({SandboxLayer.BWRAP})) if no_bwrap else p


def check(p, home, answers=None, flag=False):
    asked = []

    def ask(q):
        asked.append(q)
        return answers.pop(0)

    ensure_consent(p, probe(p), home, accept_flag=flag, ask=None if answers is None else ask)
    return asked


def test_without_bwrap_asked_once_then_remembered(tmp_path):
    p, home = policy(tmp_path), tmp_path / "home"
    if not probe(p).protective:
        pytest.skip("neither Landlock nor seccomp here: the shell refuses anyway")
    assert len(check(p, home, ["y\n"])) == 1
    assert accepted(home) and (home / "sandbox-consent.json").stat().st_mode & 0o077 == 0
    assert check(p, home, []) == []  # not asked again


def test_without_bwrap_no_is_refused_and_no_terminal_is_refused(tmp_path):
    p, home = policy(tmp_path), tmp_path / "home"
    if not probe(p).protective:
        pytest.skip("neither Landlock nor seccomp here: the shell refuses anyway")
    with pytest.raises(ConsentRefused, match="not accepted"):
        check(p, home, ["n\n"])
    with pytest.raises(ConsentRefused, match="--accept-sandbox-gaps"):
        check(p, home, None)
    assert not accepted(home)
    assert check(p, home, None, flag=True) == []  # the flag says yes


def test_no_question_with_bwrap_or_in_other_modes(tmp_path):
    home = tmp_path / "home"
    with_bwrap = policy(tmp_path, no_bwrap=False)
    if probe(with_bwrap).is_active(SandboxLayer.BWRAP):
        assert check(with_bwrap, home, None) == []
    assert check(policy(tmp_path, SandboxMode.READ_ONLY), home, None) == []
    assert not accepted(home)
