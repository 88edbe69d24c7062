"""The task tool (issue 23): child sessions on the parent's cached prefix, in parallel,
nested in stream-json, with agent definitions from .m3agent/agents."""

from __future__ import annotations

import json
import sys

from m3agent.agent.conversation import Conversation


def run(cli, repo, script, *extra):
    r = cli.run(
        "run", "investigate", "--engine", "scripted", "--script", str(script),
        "--output-format", "stream-json", "--cwd", str(repo), *extra,
    )  # fmt: skip
    return r, [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


def stop_hooks(home, tmp_path):
    """User hooks logging every Stop and SubagentStop event they get."""
    log = tmp_path / "stops.log"
    hook = f"{sys.executable} -c \"import sys; open({str(log)!r}, 'a').write(sys.stdin.read() + chr(10))\""
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {
                    "SubagentStop": [{"hooks": [{"command": hook}]}],
                    "Stop": [{"hooks": [{"command": hook}]}],
                }
            }
        )
    )
    return log


def stops(log):
    return [json.loads(x)["hook_event_name"] for x in log.read_text().splitlines() if x.strip()]


def big_repo(make_repo):
    # A snapshot of some 20K tokens: the prefix a child should find cached.
    files = {
        f"pkg/mod{i}.py": "".join(
            f"def f{i}_{j}(x):\n    return x * {j} + {i}\n" for j in range(60)
        )
        for i in range(20)
    }
    return make_repo(files)


def test_two_tasks_run_in_parallel_on_the_cached_prefix(cli, make_repo, home, m3, tmp_path):
    repo = big_repo(make_repo)
    log = stop_hooks(home, tmp_path)
    script = cli.script(
        m3.calls(
            m3.invoke("task", description="count defs", prompt="How many defs in pkg/mod1.py?"),
            m3.invoke("task", description="count more", prompt="How many defs in pkg/mod2.py?"),
        ),
        m3.answer("sixty functions"),  # the children's answers (either order)
        m3.answer("sixty functions"),
        m3.answer("Both modules have sixty functions."),
    )
    r, evs = run(cli, repo, script)
    assert r.returncode == 0, r.stderr
    calls = [e for e in evs if e["type"] == "tool_call_started" and e["name"] == "task"]
    ids = {c["call_id"] for c in calls}
    nested = [e for e in evs if e["type"] == "subagent"]
    assert {e["parent_call_id"] for e in nested} == ids
    kinds = {(e["parent_call_id"], e["event"]["type"]) for e in nested}
    for i in ids:
        assert (i, "turn_complete") in kinds and (i, "model_request_finished") in kinds
    # Parallel: both children started before either finished.
    order = [(e["parent_call_id"], e["event"]["type"]) for e in nested]
    starts = [k for k, (_, t) in enumerate(order) if t == "turn_started"]
    ends = [k for k, (_, t) in enumerate(order) if t == "turn_complete"]
    assert max(starts) < min(ends), order
    results = [e for e in evs if e["type"] == "tool_call_finished"]
    assert all("sixty functions" in e["output"] and not e["is_error"] for e in results)
    for e in results:
        first = e["metadata"]["first_request"]
        assert first["cached_share"] >= 0.95, first
        assert first["prompt_tokens"] > 15_000
    assert evs[-1]["answer"] == "Both modules have sixty functions."
    assert sorted(stops(log)) == ["Stop", "SubagentStop", "SubagentStop"]
    # Each child has its own log, opening with the parent's system block and snapshot.
    parent = Conversation.load(home / "sessions", evs[0]["session_id"]).messages
    for e in results:
        child = Conversation.load(home / "sessions", e["metadata"]["session_id"]).messages
        assert child[0] == parent[0] and child[1] == parent[1]
        assert child[2].role == "user" and "<task>" in child[2].content


def test_agent_definition_limits_tools_and_turns(cli, repo, home, m3, tmp_path):
    log = stop_hooks(home, tmp_path)
    agents = repo / ".m3agent/agents"
    agents.mkdir(parents=True)
    (agents / "reader.md").write_text(
        "---\nname: reader\ndescription: Reads files, never runs commands\n"
        "tools: Read, Grep\nmax-turns: 2\n---\nYou only read.\n"  # Claude Code's names
    )
    script = cli.script(
        m3.calls(m3.invoke("task", description="peek", prompt="look", subagent_type="reader")),
        m3.calls(m3.invoke("shell", command="touch pwned")),  # child, turn 1
        m3.calls(m3.invoke("read_file", path="greet.py")),  # child, turn 2: budget spent
        m3.answer("the child stopped"),
    )
    r, evs = run(cli, repo, script, "--approval", "never")
    assert r.returncode == 0, r.stderr
    system = Conversation.load(home / "sessions", evs[0]["session_id"]).messages[0].content
    assert "- reader: Reads files, never runs commands" in system
    nested = [e["event"] for e in evs if e["type"] == "subagent"]
    refused = [e for e in nested if e["type"] == "tool_call_finished" and e["name"] == "shell"]
    assert refused and "not available to this subagent" in refused[0]["output"]
    assert not (repo / "pwned").exists()
    done = [e for e in nested if e["type"] == "turn_complete"][0]
    assert done["reason"] == "max_turns"
    result = [e for e in evs if e["type"] == "tool_call_finished"][0]
    assert result["is_error"] and "stopped (max_turns)" in result["output"]
    # The child hit its budget (no Stop); the parent's answer fired Stop, not SubagentStop.
    assert stops(log) == ["Stop"]
    unknown = cli.script(
        m3.calls(m3.invoke("task", description="x", prompt="y", subagent_type="nobody")),
        m3.answer("ok"),
    )
    r, evs = run(cli, repo, unknown)
    out = [e for e in evs if e["type"] == "tool_call_finished"][0]["output"]
    assert "no subagent 'nobody'" in out and "reader" in out
