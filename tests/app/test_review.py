"""`m3agent review` (Codex's review mode) through the installed console script, in real git
repositories: the diff reaches the model, edits are refused, the findings come back as
`path:line: [priority] title` lines or in the JSON object; bad input is one line, exit 2."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from m3agent.agent.conversation import Conversation
from m3agent.agent.review import ReviewError, ReviewTarget, collect_diff
from m3agent.app import exit_codes

from ..support.cli import CONSOLE_SCRIPT, run_cli
from ..support.markup import answer, calls, invoke

FINDINGS = {
    "findings": [
        {"file": "greet.py", "line": 2, "priority": "P3", "title": "typo kept"},
        {
            "file": "extra.py",
            "line": 1,
            "end_line": 2,
            "priority": "P1",
            "title": "divides by zero",
            "body": "ratio(0) raises ZeroDivisionError.\nGuard the zero case.",
        },
    ],
    "summary": "Not ready to merge.",
}


def git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)
    return out.stdout.decode().strip()


def review(home: Path, script: Path, repo: Path, *flags: str):
    args = ("review", "--engine", "scripted", "--script", str(script), "--cwd", str(repo))
    return run_cli(home, *args, *flags, command=CONSOLE_SCRIPT, timeout=60)


def prompt_of(home: Path, session_id: str) -> str:
    messages = Conversation.load(home / "sessions", session_id).messages
    return next(m.content for m in messages if m.role == "user")


def test_uncommitted_findings_as_lines_and_nothing_edited(cli, repo, home):
    (repo / "greet.py").write_text('def greet():\n    return "helo!"\n')
    (repo / "extra.py").write_text("def ratio(n):\n    return 1 / n\n")  # untracked
    edit = invoke("edit_file", path="greet.py", old_string="helo!", new_string="hello")
    script = cli.script(calls(edit, reasoning="Fix it myself?"), answer(json.dumps(FINDINGS)))
    r = review(home, script, repo, "--output-format", "json", "check division")
    assert r.returncode == exit_codes.OK, r.stderr
    result = json.loads(r.stdout)
    assert result["findings"][0]["file"] == "extra.py"  # the worst first
    assert (result["findings"][0]["line"], result["findings"][0]["end_line"]) == (1, 2)
    assert result["summary"] == "Not ready to merge."
    assert result["tool_calls"] == 1
    # read-only: the edit was refused and the file is as the user left it
    assert (repo / "greet.py").read_text() == 'def greet():\n    return "helo!"\n'
    prompt = prompt_of(home, result["session_id"])
    assert '+    return "helo!"' in prompt and "+    return 1 / n" in prompt  # staged or not
    assert "Also: check division" in prompt and '"findings"' in prompt  # and the schema
    assert "reviewing the uncommitted changes: 2 files" in r.stderr

    # text: one `path:line: [priority] title` line per finding, the body indented under it
    r = review(home, cli.script(answer("```json\n" + json.dumps(FINDINGS) + "\n```")), repo)
    assert r.returncode == exit_codes.OK, r.stderr
    assert r.stdout.splitlines() == [
        "extra.py:1-2: [P1] divides by zero",
        "    ratio(0) raises ZeroDivisionError.",
        "    Guard the zero case.",
        "greet.py:2: [P3] typo kept",
        "2 findings",
        "Not ready to merge.",
    ]


def test_base_branch_review_and_an_answer_without_findings(cli, repo, home):
    git(repo, "branch", "-M", "main")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "greet.py").write_text('def greet():\n    return "hi"\n')
    git(repo, "commit", "-qam", "hi")
    (repo / "sub").mkdir()  # from a subdirectory: the review is the repository's
    r = review(home, cli.script(answer("Looks fine to me.")), repo / "sub", "--base", "main")
    # the answer is not the findings' JSON: shown as written, one error line, exit 1
    assert r.returncode == exit_codes.INTERNAL_ERROR
    assert r.stdout == "Looks fine to me.\n"
    assert "error: the answer is not JSON" in r.stderr
    assert "reviewing this branch against main: 1 file" in r.stderr


def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, home):
    plain = tmp_path / "plain"
    plain.mkdir()
    r = review(home, cli.script(answer("{}")), plain, "--output-format", "json")
    assert r.returncode == exit_codes.USAGE_ERROR
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1
    assert r.stderr == f"error: {plain} is not in a git repository\n"
    line = json.loads(r.stdout)
    assert line["is_error"] and line["exit_code"] == 2 and line["errors"][0]["kind"] == "usage"


def test_targets_and_their_mistakes(repo):
    git(repo, "branch", "-M", "main")
    first = git(repo, "rev-parse", "HEAD")
    with pytest.raises(ReviewError, match="no uncommitted changes"):
        collect_diff(repo, ReviewTarget())
    (repo / "greet.py").write_text('def greet():\n    return "hello"\n')
    git(repo, "commit", "-qam", "fix the greeting")
    git(repo, "tag", "v1")
    git(repo, "pack-refs", "--all")  # the tag and branches now in packed-refs
    one = collect_diff(repo, ReviewTarget(commit=git(repo, "rev-parse", "--short", "HEAD")))
    assert "fix the greeting" in one.text and '+    return "hello"' in one.text
    assert one.files == ("greet.py",)
    assert collect_diff(repo, ReviewTarget(commit="v1")).text == one.text
    assert "greet.py" in collect_diff(repo, ReviewTarget(base=first[:10])).files
    with pytest.raises(ReviewError, match="nothing to review: this branch has no changes"):
        collect_diff(repo, ReviewTarget(base="main"))
    for bad in ("nope", "-p", "main..v1", "HEAD~1", "deadbeef"):
        with pytest.raises(ReviewError, match="no such branch, tag or commit"):
            collect_diff(repo, ReviewTarget(commit=bad))
    with pytest.raises(ReviewError, match="not both"):
        ReviewTarget(base="main", commit="v1")
    (repo / "link.py").symlink_to("/etc/passwd")  # untracked: named, never read through
    linked = collect_diff(repo, ReviewTarget())
    assert linked.files == ("link.py",) and "[a symbolic link to /etc/passwd]" in linked.text
