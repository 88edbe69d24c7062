"""The append-only prompt across edits and a compaction, through the real factory, session,
loop, tools and scripted engine (real renderer, real tokenizer, real M3 markup)."""

from __future__ import annotations

import asyncio

from m3agent.agent import events as ev
from m3agent.agent.compaction import SUMMARY_HEADER
from m3agent.agent.context import SNAPSHOT_OPEN
from m3agent.agent.conversation import Conversation
from m3agent.agent.ops import Compact, UserTurn
from m3agent.app.factory import build_session
from m3agent.app.settings import Settings
from m3agent.engine.backends.scripted import common_prefix_len

from ...support.session_ops import NoCheckpoints, drive
from ...support.settings import isolated_settings

NS = "]<]minimax[>["


def invoke(name: str, **params: str) -> str:
    body = "".join(f"{NS}<{k}>{v}{NS}</{k}>" for k, v in params.items())
    return f'{NS}<invoke name="{name}">{body}{NS}</invoke>\n'


def calls(*invokes: str) -> str:
    return f"</mm:think>{NS}<tool_call>\n{''.join(invokes)}{NS}</tool_call>"


def answer(text: str) -> str:
    return f"</mm:think>{text}"


def settings_for(tmp_path, **kw) -> Settings:
    return isolated_settings(
        tmp_path,
        engine="scripted",
        approval="never",
        thinking="disabled",
        **kw,
    )


def test_prefix_property_across_edits_and_compaction(make_repo, tmp_path):
    from m3agent.engine.backends.scripted import ScriptedEngine

    repo = make_repo(
        {
            "AGENTS.md": "Run the tests before answering.\n",
            "calc.py": "def add(a, b):\n    return a - b\n",
            "test_calc.py": "from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n",
        }
    )
    engine = ScriptedEngine(
        [
            calls(invoke("read_file", path="calc.py")),
            calls(invoke("edit_file", path="calc.py", old_string="a - b", new_string="a + b")),
            answer("Fixed add()."),
            answer("I read calc.py and fixed add() to return a + b."),  # the compaction summary
            calls(invoke("read_file", path="calc.py")),
            answer("calc.py now returns a + b."),
        ]
    )
    session = build_session(
        settings_for(tmp_path), cwd=repo, engine=engine, checkpoints=NoCheckpoints()
    )
    snapshot_before = session.messages[1]
    assert snapshot_before.role == "system" and snapshot_before.content.startswith(SNAPSHOT_OPEN)
    assert "return a - b" in snapshot_before.content
    assert "Run the tests before answering." in snapshot_before.content

    seen = asyncio.run(
        drive(
            session,
            [
                UserTurn("fix add"),
                Compact(),
                UserTurn("what changed?"),
            ],
        )
    )
    ctx = [e for e in seen if isinstance(e, ev.ContextEvent) and e.action != "checkpoint"]
    assert [e.action for e in ctx] == ["snapshot", "compact"]
    assert ctx[0].detail["files"] == 2 and ctx[0].detail["instructions"] == "AGENTS.md"
    assert ctx[1].detail["summary_source"] == "model"
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"

    ids = engine.prompt_token_ids
    assert len(ids) == 6
    compaction_request = 3  # the summary call; request 4 is the first after the compaction
    for n in range(len(ids) - 1):
        if n == compaction_request:
            continue
        assert ids[n + 1][: len(ids[n])] == ids[n], f"request {n} is not a prefix of {n + 1}"
    # Across the compaction the system block and the snapshot still match token for token.
    tok = engine._tok()
    snap_tokens = len(tok.encode_text(snapshot_before.content))
    assert common_prefix_len(ids[3], ids[4]) > snap_tokens
    # The snapshot was never rewritten, not by the edit, not by the compaction.
    assert session.messages[1] == snapshot_before
    assert session.messages[2].content.startswith(SUMMARY_HEADER)

    finished = [e.usage for e in seen if isinstance(e, ev.ModelRequestFinished)]
    assert len(finished) == 5  # the summary call is not a turn's request
    assert finished[0].cache_miss_reason == "first request"
    assert [u.cache_miss_reason for u in finished[1:3]] == [None, None]
    assert finished[3].cache_miss_reason == "compaction"
    assert finished[3].cached_prompt_tokens >= snap_tokens // 128 * 128 - 128
    assert finished[4].cache_miss_reason is None
    for u in finished[1:3] + finished[4:]:
        assert u.recomputed_prompt_tokens < len(ids[-1]) // 4  # appended tokens only
    done = [e for e in seen if isinstance(e, ev.TurnComplete)]
    assert done[1].usage.cache_miss_reason == "compaction"

    # The log replays to the same (compacted) conversation.
    again = Conversation.load(tmp_path / "home" / "sessions", session.id)
    assert again.messages == session.messages


def test_refresh_is_an_explicit_reported_event(make_repo, tmp_path):
    from m3agent.engine.backends.scripted import ScriptedEngine

    repo = make_repo({"a.py": "x = 1\n"})
    engine = ScriptedEngine([answer("ok"), answer("summary"), answer("ok again")])
    session = build_session(
        settings_for(tmp_path), cwd=repo, engine=engine, checkpoints=NoCheckpoints()
    )
    first = session.messages[1].content
    (repo / "a.py").write_text("x = 2\n")
    seen = asyncio.run(
        drive(
            session,
            [
                UserTurn("hi"),
                Compact(refresh_snapshot=True),
                UserTurn("and now?"),
            ],
        )
    )
    actions = [
        e.action for e in seen if isinstance(e, ev.ContextEvent) and e.action != "checkpoint"
    ]
    assert actions == ["snapshot", "refresh"]
    fresh = session.messages[1].content
    assert "x = 1" in first and "x = 2" in fresh and fresh != first
    last = [e.usage for e in seen if isinstance(e, ev.ModelRequestFinished)][-1]
    assert last.cache_miss_reason == "snapshot refreshed"


def test_no_snapshot_when_disabled_or_empty(tmp_path):
    from m3agent.engine.backends.scripted import ScriptedEngine

    empty = tmp_path / "empty"
    empty.mkdir()
    s = build_session(
        settings_for(tmp_path), cwd=empty, engine=ScriptedEngine([]), checkpoints=NoCheckpoints()
    )
    assert [m.role for m in s.messages] == ["system"]
    (empty / "f.py").write_text("y = 1\n")
    s2 = build_session(
        settings_for(tmp_path, context=False),
        cwd=empty,
        engine=ScriptedEngine([]),
        checkpoints=NoCheckpoints(),
    )
    assert [m.role for m in s2.messages] == ["system"]
    s3 = build_session(
        settings_for(tmp_path), cwd=empty, engine=ScriptedEngine([]), checkpoints=NoCheckpoints()
    )
    assert [m.role for m in s3.messages] == ["system", "system"]
    for x in (s, s2, s3):
        asyncio.run(x.close())


def test_automatic_compaction_near_the_limit(make_repo, tmp_path):
    from m3agent.engine.backends.scripted import ScriptedEngine

    repo = make_repo({f"m{i}.py": f"def f{i}(x):\n    return x * {i}\n" * 40 for i in range(30)})
    engine = ScriptedEngine(
        [answer("one"), answer("summary of turn one"), answer("two")], max_context_tokens=14_000
    )
    settings = settings_for(tmp_path, context_reserve=3_000)
    session = build_session(settings, cwd=repo, engine=engine, checkpoints=NoCheckpoints())
    seen = asyncio.run(drive(session, [UserTurn("first"), UserTurn("second")]))
    kinds = [
        (type(e).__name__, getattr(e, "action", None))
        for e in seen
        if isinstance(e, (ev.ContextEvent, ev.TurnStarted))
    ]
    assert kinds == [
        ("ContextEvent", "snapshot"),
        ("TurnStarted", None),
        ("ContextEvent", "compact"),
        ("TurnStarted", None),
    ]
    compact = next(e for e in seen if isinstance(e, ev.ContextEvent) and e.action == "compact")
    assert compact.detail["trigger"] == "auto"
    assert len(engine.prompt_token_ids) == 3
    assert session.messages[2].content.endswith("summary of turn one")
