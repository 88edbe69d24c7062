"""Per-path rules from the command line and the project's `.m3agent/settings.json` (issue 22),
through the installed console script and the scripted engine emitting real M3 calls.
Headless with --approval untrusted nobody answers, so an edit that is asked about is denied:
a path rule that allows it is seen as the edit happening."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

M3AGENT = Path(sys.executable).parent / "m3agent"


def _run(cli, repo, *args, replies):
    return subprocess.run(
        [str(M3AGENT), "run", "edit", "--engine", "scripted", "--script",
         str(cli.script(*replies)), "-C", str(repo), "--approval", "untrusted",
         "--output-format", "stream-json", *args],
        env=cli.env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _edits(m3, *paths):
    return m3.calls(
        *(m3.invoke("edit_file", path=p, old_string="helo", new_string="hello") for p in paths)
    )


def _finished(stdout):
    return [json.loads(x) for x in stdout.splitlines() if '"tool_call_finished"' in x]


def _layout(repo):
    for p in ("src/a.py", "secrets/k.py"):
        (repo / p).parent.mkdir(parents=True, exist_ok=True)
        (repo / p).write_text('x = "helo"\n')


def test_allowed_tools_takes_claude_code_path_rules(cli, repo, m3):
    _layout(repo)
    replies = (_edits(m3, "src/a.py"), _edits(m3, "greet.py"), m3.answer("ok"))
    r = _run(cli, repo, "--allowed-tools", "Edit(src/**)", replies=replies)
    assert r.returncode == 0, r.stderr
    first, second = _finished(r.stdout)
    assert not first["is_error"] and "hello" in (repo / "src/a.py").read_text()
    assert second["is_error"] and "denied" in second["output"]  # outside src: asked, denied
    assert "helo" in (repo / "greet.py").read_text()
    # --disallowed-tools with a path denies even under --approval never.
    r = _run(cli, repo, "--approval", "never", "--disallowed-tools", "edit_file(secrets/**)",
             replies=(_edits(m3, "secrets/k.py"), m3.answer("ok")))  # fmt: skip
    (done,) = _finished(r.stdout)
    assert done["is_error"] and "helo" in (repo / "secrets/k.py").read_text()


def test_a_rule_with_a_space_inside_its_parentheses_is_one_rule(cli, repo, m3):
    (repo / "my notes").mkdir()
    (repo / "my notes/a.md").write_text("helo\n")
    replies = (_edits(m3, "my notes/a.md"), m3.answer("ok"))
    r = _run(cli, repo, "--allowed-tools", "read_file, Edit(my notes/**)", replies=replies)
    assert r.returncode == 0, r.stderr
    (done,) = _finished(r.stdout)
    assert not done["is_error"] and "hello" in (repo / "my notes/a.md").read_text()


def test_a_bad_rule_on_the_command_line_exits_2(cli, repo, m3):
    for bad in ("Edit(../outside/**)", "Edit(/etc/**)"):
        r = _run(cli, repo, "--allowed-tools", bad, replies=(m3.answer("ok"),))
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith("error: rule ") and len(r.stderr.splitlines()) == 1


def test_project_settings_count_only_after_trust(cli, repo, home, m3):
    from m3agent.app.prefix_rules import trust_project

    _layout(repo)
    (repo / ".m3agent").mkdir()
    (repo / ".m3agent/settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Edit(src/**)", "Edit(../**)"]}})
    )
    replies = (_edits(m3, "src/a.py"), m3.answer("ok"))
    r = _run(cli, repo, replies=replies)
    (done,) = _finished(r.stdout)
    assert done["is_error"] and "is not trusted" in r.stderr  # untrusted: asked, denied
    home.mkdir(parents=True, exist_ok=True)
    trust_project(home, repo)
    r = _run(cli, repo, replies=replies)
    (done,) = _finished(r.stdout)
    assert not done["is_error"] and "hello" in (repo / "src/a.py").read_text()
    assert "refused: rule 'Edit(../**)'" in r.stderr  # the outside rule never counts
