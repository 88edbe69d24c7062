"""Attacks first, on "always allow this command prefix": a prefix is computed per program, so
an allowed `git grep ...` does not cover `git grep -O'touch ../x'` (a pager option runs a
program), and an allowed `timeout 60 true` / `nice -n 5 true` does not cover what else the
wrapper runs. The end-to-end cases drive a real session (scripted model, real shell tool,
full-access sandbox, the real terminal approver of `m3agent run`) and look at the files."""

from __future__ import annotations

import asyncio
import io
import subprocess
from pathlib import Path

import pytest
from m3agent.agent import command_prefix as cp
from m3agent.agent import events as ev
from m3agent.agent.command_prefix import command_prefix, matches
from m3agent.app.headless_approvals import tty_approver
from m3agent.app.settings import load_settings

from ..support.markup import calls, invoke


def shell_call(command: str) -> str:
    return calls(invoke("shell", command=command))


@pytest.fixture
def grep_repo(tmp_path) -> Path:
    root = tmp_path / "proj" / "repo"  # ../x lands in tmp_path/proj, outside the workspace
    root.mkdir(parents=True)
    (root / "a.txt").write_text("needle\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "a.txt"], cwd=root, check=True)
    return root


def drive(repo: Path, commands: list[str], answers: str) -> tuple[list[str], str]:
    """Runs one turn whose model calls `commands` in order; the terminal approver reads
    `answers`. Returns (the outputs of the calls, what the approver asked)."""
    from m3agent.agent import ops
    from m3agent.app.factory import build_session
    from m3agent.engine.backends.scripted import ScriptedEngine

    settings = load_settings().override(sandbox="full-access", approval="untrusted", context=False)
    script = [shell_call(c) for c in commands] + ["</mm:think>done"]
    session = build_session(settings, cwd=repo, engine=ScriptedEngine(script))
    err = io.StringIO()
    approve = tty_approver(err, stdin=io.StringIO(answers))

    async def go() -> list[str]:
        outs: list[str] = []
        try:
            session.submit(ops.UserTurn("go"))
            async for e in session.events():
                if isinstance(e, ev.ApprovalRequest):
                    session.submit(await approve(e))
                elif isinstance(e, ev.ToolCallFinished):
                    outs.append(e.output)
                elif isinstance(e, ev.TurnComplete):
                    break
        finally:
            await session.close()
        return outs

    return asyncio.run(go()), err.getvalue()


PAGER = "git grep -O'touch ../x' needle"


def test_allowed_git_grep_does_not_cover_a_pager_option(home, grep_repo):
    outs, asked = drive(grep_repo, ["git grep needle", PAGER], "p\nn\n")
    assert asked.count("Approve shell") == 2  # the pager call was asked about
    assert not (grep_repo.parent / "x").exists()
    assert "needle" in outs[0]


def test_control_without_the_rules_the_pager_call_runs_unasked_and_writes_outside(
    home, grep_repo, monkeypatch
):
    def first_two_words(words: list[str]):  # the old rule: git's first two words
        return tuple(words[:2])

    monkeypatch.setattr(cp, "prefix_of", first_two_words)
    outs, asked = drive(grep_repo, ["git grep needle", PAGER], "p\n")
    assert asked.count("Approve shell") == 1
    assert (grep_repo.parent / "x").exists()


@pytest.mark.parametrize(
    ("allowed", "attempt"),
    [("timeout 60 true", "timeout 60 touch ../y"), ("nice -n 5 true", "nice -n 5 touch ../y")],
)
def test_an_allowed_wrapper_does_not_cover_what_else_it_runs(home, grep_repo, allowed, attempt):
    outs, asked = drive(grep_repo, [allowed, attempt], "p\nn\n")
    assert asked.count("Approve shell") == 2
    assert not (grep_repo.parent / "y").exists()


def test_control_the_wrapper_attempt_writes_outside_when_it_runs(home, grep_repo, monkeypatch):
    monkeypatch.setattr(cp, "prefix_of", lambda words: (words[0],))  # the old first-word rule
    outs, asked = drive(grep_repo, ["timeout 60 true", "timeout 60 touch ../y"], "p\n")
    assert asked.count("Approve shell") == 1
    assert (grep_repo.parent / "y").exists()


@pytest.mark.parametrize(
    "command",
    [
        "git grep -O'touch ../x' needle",
        "git grep -nOtouch needle",
        "git grep --open-files-in-pager=vi needle",
        "git grep --open-files=vi needle",  # git takes unambiguous abbreviations
        "git -c core.pager=sh log",
        "git -C /etc status",
        "git fetch --upload-pack='touch /tmp/x' origin",
        "git pull -u'touch x' origin",
        "git push --receive-pack=x origin",
        "git rebase -x 'make' main",
        "git log --output=/etc/x",
        "git diff --ext-diff",
        "git clone -c core.sshCommand=x url",
        "git format-patch -o /tmp HEAD~1",
        "git myalias",  # an alias may be `!sh -c ...`
        "git submodule foreach rm",
        "find . -exec rm {} +",
        "find . -name x -delete",
        "find . -fprint /etc/x",
        "xargs rm",
        "env rm -rf x",
        "sudo ls",
        "bash -c 'rm -rf x'",
        "sh -c ls",
        "exec rm x",
        "nohup",
        "timeout 60",
        "timeout --bogus 60 true",  # an option we do not know may carry the command
        "stdbuf -oL",
        "make SHELL=/tmp/evil test",
        "make -C /etc test",
        "npm test --script-shell=/tmp/evil",
        "npm exec evil",
        "cargo test --config x",
        "go test -exec /tmp/x ./...",
        "python -c x",
        "python x.py",
        "sed -n 'e touch x' f",
        "/usr/bin/env rm x",
        "npx cowsay",
        "tar --checkpoint=1 --checkpoint-action=exec=touch -cf x.tar .",
        "tar -I 'touch x' -cf a.tar .",
        "rsync -e 'touch x' a b",
        "vim -c x",
        "sqlite3 db .shell",
        "tar -xI 'touch x' -f a.tar",  # a bundle holding -I
        "tar xIf 'touch x' a.tar",  # tar's dashless first word
        "make -sC /etc test",
        "go test -C /etc ./...",
    ],
)
def test_commands_that_run_other_programs_get_no_prefix(command):
    assert command_prefix(command) is None, command


@pytest.mark.parametrize(
    ("command", "prefix"),
    [
        ("git grep -n needle", ("git", "grep")),
        ("git status -uno", ("git", "status")),  # -u is dangerous only for fetch/pull/clone
        ("timeout 60 true", ("timeout", "60", "true")),
        ("timeout -s KILL 60 pytest -x", ("timeout", "-s", "KILL", "60", "pytest")),
        ("nice -n 5 true", ("nice", "-n", "5", "true")),
        ("nohup pytest", ("nohup", "pytest")),
        ("time git status", ("time", "git", "status")),
        ("/usr/bin/timeout 5 true", ("/usr/bin/timeout", "5", "true")),
        ("find . -name '*.py'", None),  # a glob is shell syntax: no prefix
        ("find . -name x", ("find",)),
        ("make test", ("make", "test")),
        ("python -m pytest -q", ("python", "-m", "pytest")),
        ("tar xzf a.tgz", ("tar",)),
        ("tar -czf a.tgz src", ("tar",)),
        ("go test -run=TestCache ./...", ("go", "test")),  # Go flags do not bundle
    ],
)
def test_prefixes_per_program(command, prefix):
    assert command_prefix(command) == prefix


def test_a_wrapper_prefix_covers_only_the_same_wrapped_command():
    allowed = command_prefix("timeout 60 true")
    assert matches("timeout 60 true", allowed)
    for attempt in ("timeout 60 rm -rf ~", "timeout 60 true; rm", "timeout 6 true", "true"):
        assert not matches(attempt, allowed), attempt
    nice = command_prefix("nice -n 5 true")
    assert not matches("nice -n 5 rm -rf x", nice) and not matches("nice -n 5 sh -c x", nice)
    assert not matches("/usr/bin/timeout 60 rm -rf x", ("/usr/bin/timeout",))
