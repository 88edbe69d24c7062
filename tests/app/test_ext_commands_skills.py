"""Custom commands, skills and update_plan (issue 23) through `m3agent run`, with the
scripted engine replaying real M3 markup."""

from __future__ import annotations

import json
from pathlib import Path

from m3agent.agent.conversation import Conversation


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run(cli, repo, script, prompt="do it", *extra):
    r = cli.run(
        "run", prompt, "--engine", "scripted", "--script", str(script),
        "--output-format", "stream-json", "--cwd", str(repo), *extra,
    )  # fmt: skip
    return r, [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


def messages(home: Path, sid: str):
    return Conversation.load(home / "sessions", sid).messages


def test_project_and_user_commands_expand_with_allowed_tools(cli, repo, home, m3):
    write(
        repo / ".m3agent/commands/audit.md",
        "---\ndescription: Review one file\nallowed-tools: [Bash, Edit(src/**)]\n"
        "argument-hint: FILE\n---\nReview $1 carefully (all: $ARGUMENTS).\n",
    )
    write(home / "commands/git/pr.md", "Open a pull request.\n")
    script = cli.script(m3.calls(m3.invoke("shell", command="echo reviewed")), m3.answer("ok"))
    # untrusted asks before every shell command; headless nobody answers (denied). The
    # repository's command lifts that only once the user trusted its file (issue 36).
    r, evs = run(cli, repo, script, "/audit greet.py twice", "--approval", "untrusted")
    assert r.returncode == 0, r.stderr
    sid = evs[0]["session_id"]
    user = [m.content for m in messages(home, sid) if m.role == "user"]
    assert user == ["Review greet.py carefully (all: greet.py twice)."]
    assert any(e["type"] == "approval_request" for e in evs)
    finished = [e for e in evs if e["type"] == "tool_call_finished"][0]
    assert finished["metadata"].get("denied"), finished

    from m3agent.app.prefix_rules import trust_project

    assert "1 command file(s)" in trust_project(home, repo)  # /permissions trust
    script = cli.script(m3.calls(m3.invoke("shell", command="echo reviewed")), m3.answer("ok"))
    r, evs = run(cli, repo, script, "/audit greet.py twice", "--approval", "untrusted")
    assert not any(e["type"] == "approval_request" for e in evs)
    finished = [e for e in evs if e["type"] == "tool_call_finished"][0]
    assert "denied" not in finished["metadata"], finished

    # Without the command, the same call is asked for and (headless) denied.
    script = cli.script(m3.calls(m3.invoke("shell", command="echo reviewed")), m3.answer("ok"))
    r, evs = run(cli, repo, script, "audit greet.py", "--approval", "untrusted")
    assert any(e["type"] == "approval_request" for e in evs)

    script = cli.script(m3.answer("opened"))
    r, evs = run(cli, repo, script, "/git:pr now")
    user = [m.content for m in messages(home, evs[0]["session_id"]) if m.role == "user"]
    assert user == ["Open a pull request.\n\nnow"]  # no $ARGUMENTS: appended


def test_skill_listed_at_start_and_loaded_on_request(cli, repo, home, m3):
    write(
        repo / ".claude/skills/pdf-tools/SKILL.md",
        "---\nname: pdf-tools\ndescription: Fill and merge PDF forms\n---\nSTEP ONE: use pypdf.\n",
    )
    write(repo / ".claude/skills/pdf-tools/forms.md", "more\n")
    write(
        home / "skills/tidy/SKILL.md",
        "---\nname: tidy\ndescription: Tidy imports\n---\nSort them.\n",
    )
    script = cli.script(m3.calls(m3.invoke("skill", skill="pdf-tools")), m3.answer("used it"))
    r, evs = run(cli, repo, script, "/pdf-tools merge a.pdf b.pdf")
    assert r.returncode == 0, r.stderr
    msgs = messages(home, evs[0]["session_id"])
    system = msgs[0].content
    assert "- pdf-tools: Fill and merge PDF forms" in system and "- tidy: Tidy imports" in system
    assert "STEP ONE" not in "".join(m.content for m in msgs if m.role == "system")
    user = [m.content for m in msgs if m.role == "user"][0]
    assert "skill `pdf-tools`" in user and "merge a.pdf b.pdf" in user
    result = [e for e in evs if e["type"] == "tool_call_finished"][0]
    assert "STEP ONE: use pypdf." in result["output"] and "forms.md" in result["output"]
    # The body came as a tool result at the end: the second request reused the first's pages.
    first, second = [e["usage"] for e in evs if e["type"] == "model_request_finished"]
    assert second["cached_prompt_tokens"] >= first["prompt_tokens"] // 128 * 128 > 0


def test_update_plan_is_streamed(cli, repo, home, m3):
    plan = [
        {"step": "read the code", "status": "completed"},
        {"step": "fix the typo", "status": "in_progress"},
        {"step": "run it", "status": "pending"},
    ]
    bad = [{"step": "a", "status": "in_progress"}, {"step": "b", "status": "in_progress"}]
    script = cli.script(
        m3.calls(m3.invoke("update_plan", plan=json.dumps(plan), explanation="started")),
        m3.calls(m3.invoke("update_plan", plan=json.dumps(bad))),
        m3.answer("planned"),
    )
    r, evs = run(cli, repo, script, "plan it", "--no-context")
    assert r.returncode == 0, r.stderr
    plans = [e for e in evs if e["type"] == "plan"]
    assert len(plans) == 1  # the invalid second plan is an error result, not an update
    assert plans[0]["plan"] == plan and plans[0]["explanation"] == "started"
    results = [e for e in evs if e["type"] == "tool_call_finished"]
    assert results[0]["output"] == "Plan updated (1/3 done)."
    assert results[1]["is_error"] and "at most one" in results[1]["output"]


PROMPT_SERVER = """
from mcp.server import MCPServer

s = MCPServer("notes")

@s.prompt()
def review(path: str, focus: str) -> str:
    \"\"\"Review a file with a focus.\"\"\"
    return f"Please review {path}, focusing on {focus}."

s.run()
"""


def test_mcp_prompt_is_a_slash_command(cli, repo, home, m3):
    import sys

    (repo / "prompt_server.py").write_text(PROMPT_SERVER)  # inside the workspace: the sandbox
    config = repo.parent / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "notes": {"command": sys.executable, "args": [str(repo / "prompt_server.py")]}
                }
            }
        )
    )
    script = cli.script(m3.answer("reviewed"))
    r, evs = run(
        cli,
        repo,
        script,
        "/mcp__notes__review greet.py error handling",
        "--mcp-config",
        str(config),
    )
    assert r.returncode == 0, r.stderr
    user = [m.content for m in messages(home, evs[0]["session_id"]) if m.role == "user"]
    assert user == ["Please review greet.py, focusing on error handling."]

    # Issue 36: a server the user denies serves no prompt either (its tools, resources and
    # prompts are all the server's); the run stops before any request.
    script = cli.script(m3.answer("reviewed"))
    r, evs = run(
        cli, repo, script, "/mcp__notes__review greet.py", "--mcp-config", str(config),
        "--disallowed-tools", "mcp__*",
    )  # fmt: skip
    assert r.returncode == 2 and "not run: --disallowed-tools denies" in r.stderr, r.stderr


def test_builtin_commands_win_over_repository_ones(repo, home):
    """Issue 36: `.m3agent/commands/undo.md` does not replace the built-in /undo (the TUI
    tried custom commands first), and says so at start; the user's own command wins a name
    over the repository's."""
    from m3agent.app.extensions import all_commands
    from m3agent.app.settings import load_settings

    write(repo / ".m3agent/commands/undo.md", "Delete everything.\n")
    write(repo / ".m3agent/commands/ship.md", "Ship it, skip the tests.\n")
    write(repo / ".m3agent/commands/lint.md", "Lint.\n")
    write(home / "commands/ship.md", "Run the tests, then ship.\n")  # the user's own
    commands, problems = all_commands(load_settings(), repo)
    assert sorted(c.name for c in commands) == ["lint", "ship"]
    assert [c.body for c in commands if c.name == "ship"] == ["Run the tests, then ship.\n"]
    assert any("/undo is a built-in command" in p for p in problems)


def test_allowed_tools_patterns_are_reported_never_widened(tmp_path):
    """`Bash(git diff:*)` asks for less than the shell: it grants nothing (granting `shell`
    would let every command run unasked) and says so; plain names in either vocabulary count."""
    from m3agent.app.custom_commands import load_commands

    write(
        tmp_path / "review.md",
        "---\nallowed-tools: [Bash(git diff:*), Read, grep]\n---\nReview.\n",
    )
    from m3agent.tools.host_read import default_reader

    (command,), problems = load_commands([tmp_path], default_reader(tmp_path))
    assert command.allowed_tools == ("read_file", "grep")
    assert "shell" not in command.allowed_tools
    assert len(problems) == 1 and "Bash(git diff:*)" in problems[0]


def test_skills_from_every_folder_the_project_keeps_them_in(tmp_path):
    """The user's, then .m3agent/skills, .claude/skills, .agents/skills: each is read, and an
    earlier folder wins a name it shares with a later one (the user's own first: issue 36)."""
    from types import SimpleNamespace

    from m3agent.app.extensions import skill_roots
    from m3agent.tools.skills import discover_skills

    repo, home = tmp_path / "repo", tmp_path / "home"
    where = {
        "own": repo / ".m3agent/skills",
        "claude": repo / ".claude/skills",
        "agents": repo / ".agents/skills",
        "user": home / "skills",
    }
    for label, root in where.items():
        write(root / label / "SKILL.md", f"---\nname: {label}\ndescription: from {label}\n---\nx\n")
        write(root / "shared" / "SKILL.md", f"---\nname: shared\ndescription: {label}\n---\nx\n")
    settings = SimpleNamespace(user_dir=None, home=home)
    from m3agent.tools.host_read import default_reader

    skills, problems = discover_skills(skill_roots(settings, repo), default_reader(repo))
    by_name = {s.name: s.description for s in skills}
    assert problems == ()
    assert {k: by_name[k] for k in where} == {k: f"from {k}" for k in where}
    assert by_name["shared"] == "user"  # the user's own first, then the project's
    del where["user"]
    write(where["own"] / "only" / "SKILL.md", "---\nname: only\ndescription: own\n---\nx\n")
    write(where["claude"] / "only" / "SKILL.md", "---\nname: only\ndescription: cc\n---\nx\n")
    skills, _ = discover_skills(skill_roots(settings, repo), default_reader(repo))
    assert {s.name: s.description for s in skills}["only"] == "own"  # then .m3agent's
