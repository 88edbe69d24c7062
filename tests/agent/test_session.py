"""Session protocol: interrupts, approvals, thinking mode, resume, and the prefix property."""

from __future__ import annotations

import asyncio
import time

from m3agent.agent import events as ev
from m3agent.agent.config import AgentConfig, ToolRule
from m3agent.agent.ops import ApprovalDecision, Interrupt, SetThinking, UserTurn
from m3agent.agent.session import Session
from m3agent.engine.backends.scripted import ScriptedEngine
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
from m3agent.tools.toolset import default_toolset


def _timed_turn(m3, make_session, prompt, on):
    """One turn of PROMPT on the session make_session() opens, on_event=ON (which interrupts
    it); (the session, its TurnComplete, the seconds the turn took)."""

    async def go():
        s = make_session()
        t0 = time.monotonic()
        _, done = await m3.drive(s, prompt, on_event=on)
        elapsed = time.monotonic() - t0
        await s.close()
        return s, done, elapsed

    return m3.run(go())


def test_interrupt_during_generation(home, repo, m3):
    long_answer = m3.answer("word " * 400)
    sent = []

    async def on(sess, e):
        if isinstance(e, ev.ContentDelta) and not sent:
            sent.append(e)
            sess.submit(Interrupt())

    s, done, elapsed = _timed_turn(
        m3, lambda: m3.make_session(home, repo, [long_answer], chunk_delay_s=0.01), "talk", on
    )
    assert done.reason == "interrupted"
    assert elapsed < 3.0  # the full answer would take 400*5/7*0.01 s ~ 3 s
    last = s.messages[-1]
    assert last.role == "assistant" and 0 < len(last.content) < len("word " * 400)


def test_interrupt_stops_a_running_tool(home, repo, m3):
    sb = Sandbox(SandboxPolicy(workspace=repo))
    script = [m3.calls(m3.invoke("shell", command="sleep 30")), m3.answer("never")]

    async def on(sess, e):
        if isinstance(e, ev.ToolCallStarted):
            await asyncio.sleep(0.5)
            sess.submit(Interrupt())

    s, done, elapsed = _timed_turn(
        m3, lambda: m3.make_session(home, repo, script, sandbox=sb), "wait", on
    )
    assert done.reason == "interrupted"
    assert elapsed < 15.0
    tool = [m for m in s.messages if m.role == "tool"]
    assert len(tool) == 1 and "interrupted" in tool[0].content
    assert s.engine.remaining == 1  # the loop did not go on to the next engine call


def _approval_run(home, repo, m3, policy, decide, rules=()):
    script = [
        m3.calls(m3.invoke("edit_file", path="calc.py", old_string="a - b", new_string="a + b")),
        m3.answer("done"),
    ]
    asked = []

    async def go():
        s = m3.make_session(home, repo, script, approval_policy=policy, rules=rules)
        on = m3.answering(decide, asked, "use a different approach")
        seen, done = await m3.drive(s, "fix", on_event=on)
        await s.close()
        return s, seen, done

    s, seen, done = m3.run(go())
    return s, seen, done, asked


def test_untrusted_asks_and_approve_runs_the_edit(home, repo, m3):
    s, seen, done, asked = _approval_run(home, repo, m3, "untrusted", "approve")
    assert [a.name for a in asked] == ["edit_file"] and asked[0].reason
    assert "a + b" in (repo / "calc.py").read_text()
    assert done.reason == "done"


def test_deny_keeps_the_file_and_tells_the_model(home, repo, m3):
    s, seen, done, asked = _approval_run(home, repo, m3, "untrusted", "deny")
    assert len(asked) == 1
    assert "a - b" in (repo / "calc.py").read_text()
    result = [e for e in seen if isinstance(e, ev.ToolCallFinished)][0]
    assert result.is_error and "denied" in result.output and "different approach" in result.output
    assert result.output in s.engine.prompts[1]


def test_never_does_not_ask(home, repo, m3):
    _, _, done, asked = _approval_run(home, repo, m3, "never", "deny")
    assert asked == [] and "a + b" in (repo / "calc.py").read_text()


def test_config_deny_rule_wins_without_asking(home, repo, m3):
    rules = (ToolRule("edit_file", "allow"), ToolRule("edit_file", "deny"))
    _, seen, _, asked = _approval_run(home, repo, m3, "never", "approve", rules)
    assert asked == [] and "a - b" in (repo / "calc.py").read_text()
    result = [e for e in seen if isinstance(e, ev.ToolCallFinished)][0]
    assert result.is_error and "config denies" in result.output


def test_read_only_sandbox_on_request_asks(home, repo, m3):
    asked = []
    script = [
        m3.calls(m3.invoke("write_file", path="new.txt", content="x")),
        m3.answer("ok"),
    ]

    async def go():
        read_only = Sandbox(SandboxPolicy(workspace=repo, mode="read-only"))
        s = m3.make_session(home, repo, script, approval_policy="on-request", sandbox=read_only)
        await m3.drive(s, "write", on_event=m3.answering("deny", asked))
        await s.close()

    m3.run(go())
    assert [a.reason for a in asked] == ["the sandbox would block write_file"]
    assert not (repo / "new.txt").exists()


def test_thinking_mode_per_turn_and_default(home, repo, m3):
    script = [m3.answer("one"), "two", "three"]

    async def go():
        s = m3.make_session(home, repo, script)
        _, a = await m3.drive(s, "first")  # session default: enabled
        s.submit(SetThinking("disabled"))
        _, b = await m3.drive(s, "second")
        _, c = await m3.drive(s, "third", thinking_mode="adaptive")
        await s.close()
        return s

    s = m3.run(go())
    modes = [m.thinking_mode for m in s.messages if m.role == "assistant"]
    assert modes == ["enabled", "disabled", "adaptive"]
    assert [m.content for m in s.messages if m.role == "assistant"] == ["one", "two", "three"]
    again = Session.resume(
        s.id, ScriptedEngine([]), default_toolset(), AgentConfig(), sessions_dir=home / "sessions"
    )
    assert again.thinking_default == "disabled"


def test_prompt_of_each_call_extends_the_previous_one(home, repo, m3):
    """The prefix-cache contract: engine call n+1's prompt tokens start with call n's."""
    script = [
        m3.calls(m3.invoke("read_file", path="calc.py"), reasoning="Look first."),
        m3.calls(
            m3.invoke("edit_file", path="calc.py", old_string="a - b", new_string="a + b"),
            reasoning="Minus is wrong.",
            before="Editing.",
        ),
        m3.answer("Fixed.", reasoning="Done."),
        m3.calls(m3.invoke("grep", pattern="add")),
        m3.answer("It is in calc.py."),
    ]

    async def go():
        s = m3.make_session(home, repo, script)
        await m3.drive(s, "fix add")
        await m3.drive(s, "where is add?")
        await s.close()
        return s

    s = m3.run(go())
    ids = s.engine.prompt_token_ids
    assert len(ids) == 5
    for n in range(4):
        assert ids[n + 1][: len(ids[n])] == ids[n], f"call {n + 1} does not extend call {n}"
        assert len(ids[n + 1]) > len(ids[n])
    stats = s.engine.stats()
    assert stats.cached_prompt_tokens > 0.5 * (stats.prompt_tokens - len(ids[0]))


def test_resume_rebuilds_the_exact_conversation_and_continues(home, repo, m3):
    script = [m3.calls(m3.invoke("list_dir", path=".")), m3.answer("two files")]

    s, _, _ = m3.one_turn(home, repo, script, "what is here?")
    engine = ScriptedEngine([m3.answer("calc.py has add")])

    async def second():
        r = Session.resume(
            s.id,
            engine,
            default_toolset(),
            AgentConfig(thinking_default="enabled", approval_policy="never"),
            sessions_dir=home / "sessions",
        )
        assert r.messages == s.messages and r.cwd == repo
        seen, done = await m3.drive(r, "and calc.py?")
        await r.close()
        return r, seen, done

    r, seen, done = m3.run(second())
    assert seen[0].resumed is True and seen[0].session_id == s.id
    assert done.answer == "calc.py has add" and done.turn == 2
    assert r.messages[: len(s.messages)] == s.messages
    # The resumed prompt extends the last prompt of the first run, token for token.
    prev = s.engine.prompt_token_ids[-1]
    assert engine.prompt_token_ids[0][: len(prev)] == prev


def test_turns_queue_one_at_a_time(home, repo, m3):
    async def go():
        s = m3.make_session(home, repo, [m3.answer("A"), m3.answer("B")])
        s.submit(UserTurn("one"))
        s.submit(UserTurn("two"))
        order = []
        async for e in s.events():
            if isinstance(e, ev.TurnStarted | ev.TurnComplete):
                order.append((e.type, e.turn))
            if isinstance(e, ev.TurnComplete) and e.turn == 2:
                break
        await s.close()
        return s, order

    s, order = m3.run(go())
    assert order == [
        ("turn_started", 1),
        ("turn_complete", 1),
        ("turn_started", 2),
        ("turn_complete", 2),
    ]
    assert [m.content for m in s.messages if m.role == "user"] == ["one", "two"]


def test_wall_time_limit_stops_a_slow_generation(home, repo, m3):
    async def go():
        s = m3.make_session(
            home, repo, [m3.answer("slow " * 300)], chunk_delay_s=0.01, max_wall_time_s=0.3
        )
        t0 = time.monotonic()
        _, done = await m3.drive(s, "talk")
        elapsed = time.monotonic() - t0
        await s.close()
        return done, elapsed

    done, elapsed = m3.run(go())
    assert done.reason == "timeout" and elapsed < 2.0


def test_answering_through_the_events_future(home, repo, m3):
    script = [m3.calls(m3.invoke("write_file", path="f.txt", content="hi")), m3.answer("ok")]

    async def go():
        s = m3.make_session(home, repo, script, approval_policy="untrusted")

        async def on(sess, e):
            if isinstance(e, ev.ApprovalRequest):
                e.future.set_result(ApprovalDecision(e.call_id, "approve"))

        _, done = await m3.drive(s, "write", on_event=on)
        await s.close()
        return done

    assert m3.run(go()).reason == "done"
    assert (repo / "f.txt").read_text() == "hi"


def test_interrupt_submitted_from_another_thread(home, repo, m3):
    import threading

    async def go():
        s = m3.make_session(home, repo, [m3.answer("word " * 400)], chunk_delay_s=0.01)

        async def on(sess, e):
            if isinstance(e, ev.TurnStarted):
                threading.Timer(0.2, sess.submit, args=(Interrupt(),)).start()

        _, done = await m3.drive(s, "talk", on_event=on)
        await s.close()
        return done

    assert m3.run(go()).reason == "interrupted"


def test_approval_request_carries_the_tools_preview(home, repo, m3):
    from m3agent.tools.base import Preview, PreviewKind, Tool, ToolResult
    from m3agent.tools.toolset import Toolset
    from pydantic import BaseModel

    class NoteArgs(BaseModel):
        text: str

    class Note(Tool[NoteArgs]):
        name = "note"
        description = "append a line to NOTES"
        mutates = True

        def preview(self, args, ctx):
            return Preview(PreviewKind.DIFF, f"+++ b/NOTES\n+{args.text}\n")

        def run(self, args, ctx):
            with open(ctx.cwd / "NOTES", "a") as f:
                f.write(args.text + "\n")
            return ToolResult("noted")

    script = [m3.calls(m3.invoke("note", text="remember")), m3.answer("ok")]
    asked = []

    async def go():
        s = m3.make_session(
            home, repo, script, toolset=Toolset([Note()]), approval_policy="untrusted"
        )
        await m3.drive(s, "note it", on_event=m3.answering("approve_session", asked))
        await s.close()

    m3.run(go())
    assert [a.diff for a in asked] == ["+++ b/NOTES\n+remember\n"]
    assert [a.preview.kind for a in asked] == ["diff"]
    assert (repo / "NOTES").read_text() == "remember\n"
