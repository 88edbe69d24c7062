"""Per-turn thinking toggles never touch earlier tokens: the system block names the session's
mode (its starting default), each turn's mode is only its generation prefix. Measured on the
native engine (tiny random M3, CPU): a 10-turn session whose mode changes every turn
recomputes at most the new tokens plus one page per turn. Changing the session default says
first how many tokens it will recompute. (bench/thinking_toggle.py: the same at >= 100K.)"""

from __future__ import annotations

import asyncio

import pytest
from m3agent.agent import events as ev
from m3agent.agent.conversation import Conversation
from m3agent.agent.ops import SetThinking, UserTurn
from m3agent.agent.prompt_cache import THINKING_DEFAULT_CHANGED
from m3agent.app.factory import build_session
from m3agent.app.settings import Settings
from m3agent.engine.backends.scripted import ScriptedEngine, common_prefix_len

from ...support.native import recording_engine, tiny_m3
from ...support.session_ops import NoCheckpoints, drive
from ...support.settings import isolated_settings

PAGE = 128
MODES = ("enabled", "disabled", "adaptive")
PREFIX = {"enabled": "<mm:think>", "disabled": "</mm:think>", "adaptive": ""}


def settings_for(tmp_path, **kw) -> Settings:
    base = dict(engine="scripted", approval="never", thinking="adaptive")
    return isolated_settings(tmp_path, **{**base, **kw})


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_m3(tmp_path_factory.mktemp("tiny_m3_toggle"), seed=3, head_dim=64)


def test_ten_toggling_turns_recompute_only_new_tokens_on_native(tiny_dir, make_repo, tmp_path):
    from m3agent.engine.m3.chat_template import ChatTemplate, render_prompt_parts
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    repo = make_repo(
        {
            "AGENTS.md": "Answer in one line.\n",
            "pkg/core.py": "class Store:\n    def get(self, k):\n        return k\n" * 20,
        }
    )
    engine = recording_engine(tiny_dir, num_gpu_blocks=400)
    session = build_session(
        settings_for(
            tmp_path, engine="native", model=str(tiny_dir), max_tokens=4, context_budget=3000
        ),
        cwd=repo,
        engine=engine,
        checkpoints=NoCheckpoints(),
    )
    modes = [MODES[i % 3] for i in range(10)]
    plan = [UserTurn(f"turn {i}", thinking_mode=m) for i, m in enumerate(modes)]
    plan += [
        SetThinking("enabled", session_default=True),
        UserTurn("after", thinking_mode="enabled"),
    ]
    seen = asyncio.run(drive(session, plan))
    asyncio.run(engine.close())
    assert not [e for e in seen if isinstance(e, ev.Error)]
    usages = [e.usage for e in seen if isinstance(e, ev.ModelRequestFinished)]
    assert len(usages) == len(engine.requests) == 11

    tok = M3Tokenizer.from_model_dir(tiny_dir)
    tmpl = ChatTemplate.from_model_dir(tiny_dir)
    previous: list[int] = []
    recomputed = []
    for n, (req, u) in enumerate(zip(engine.requests, usages, strict=True)):
        assert req.thinking_mode == (modes + ["enabled"])[n]
        assert req.session_thinking_mode == ("adaptive" if n < 10 else "enabled")
        parts = render_prompt_parts(
            list(req.messages),
            list(req.tools),
            req.thinking_mode,
            template=tmpl,
            session_thinking_mode=req.session_thinking_mode,
        )
        assert "".join(p.text for p in parts).endswith("]~b]ai\n" + PREFIX[req.thinking_mode])
        ids = tok.encode_parts(parts)
        assert len(ids) == u.prompt_tokens
        new = len(ids) - common_prefix_len(previous, ids)
        previous = ids + engine.generated[req.request_id][:-1]
        if 0 < n < 10:  # every toggle: the new tokens (a user turn, a prefix) plus < one page
            assert u.recomputed_prompt_tokens <= new + PAGE, (n, u, new)
            assert u.cache_miss_reason is None
            recomputed.append(u.recomputed_prompt_tokens)
    assert usages[0].prompt_tokens > 2000 and max(recomputed) < 300

    # The session-default change: announced first, then the whole prompt (after the first
    # pages, which come before the mode line) is recomputed once.
    at = next(
        i
        for i, e in enumerate(seen)
        if isinstance(e, ev.ContextEvent) and e.action == "thinking_default"
    )
    change = seen[at]
    done = [i for i, e in enumerate(seen) if isinstance(e, ev.TurnComplete)]
    started = [i for i, e in enumerate(seen) if isinstance(e, ev.TurnStarted)]
    assert done[9] < at < started[10]  # said before the turn that pays for it
    assert change.detail["mode"] == "enabled" and change.detail["previous"] == "adaptive"
    last = usages[-1]
    announced = change.detail["recompute_tokens"]
    assert announced == usages[-2].prompt_tokens + usages[-2].generated_tokens
    assert last.recomputed_prompt_tokens <= announced + PAGE
    assert last.recomputed_prompt_tokens > announced - 2 * PAGE - 300
    assert last.cache_miss_reason == THINKING_DEFAULT_CHANGED


def test_session_mode_is_the_starting_default_and_survives_resume(make_repo, tmp_path):
    repo = make_repo({"a.py": "x = 1\n"})
    engine = ScriptedEngine(["one", "two", "t</mm:think>three", "</mm:think>four"])
    recorded = []
    stream = engine.stream

    def spy(request):
        recorded.append(request)
        return stream(request)

    engine.stream = spy  # type: ignore[method-assign]
    session = build_session(
        settings_for(tmp_path, thinking="disabled"),
        cwd=repo,
        engine=engine,
        checkpoints=NoCheckpoints(),
    )
    seen = asyncio.run(
        drive(
            session,
            [
                UserTurn("a"),
                SetThinking("enabled"),  # later turns only: no event, no recompute
                UserTurn("b", thinking_mode="disabled"),
                UserTurn("c"),
                SetThinking("adaptive", session_default=True),
                UserTurn("d"),
            ],
        )
    )
    assert [r.session_thinking_mode for r in recorded] == ["disabled"] * 3 + ["adaptive"]
    assert [r.thinking_mode for r in recorded] == ["disabled", "disabled", "enabled", "adaptive"]
    changes = [e for e in seen if isinstance(e, ev.ContextEvent) and e.action == "thinking_default"]
    assert len(changes) == 1 and changes[0].detail["recompute_tokens"] > 0
    # the log remembers both: a resumed session writes the same system block
    meta = Conversation.load(tmp_path / "home" / "sessions", session.id).meta
    assert (meta.session_thinking_mode, meta.thinking_default) == ("adaptive", "adaptive")
    # the scripted engine counts cached tokens: toggles kept the cache, the change did not
    finished = [e.usage for e in seen if isinstance(e, ev.ModelRequestFinished)]
    assert [u.cache_miss_reason for u in finished[1:]] == [None, None, THINKING_DEFAULT_CHANGED]


def test_default_change_before_any_request_costs_nothing(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    session = build_session(
        settings_for(tmp_path),
        cwd=empty,
        engine=ScriptedEngine(["ok"]),
        checkpoints=NoCheckpoints(),
    )
    seen = asyncio.run(
        drive(session, [SetThinking("enabled", session_default=True), UserTurn("hi")])
    )
    events = [e for e in seen if isinstance(e, ev.ContextEvent) and e.action == "thinking_default"]
    assert len(events) == 1 and events[0].detail["recompute_tokens"] == 0
    assert session.session_thinking_mode == "enabled"


def test_tui_think_default_and_its_notice():
    from m3agent.app.context_notice import describe_context_event
    from m3agent.app.slash import SlashError, parse_slash

    assert parse_slash("/think default enabled").arg == "default enabled"
    assert parse_slash("/think disabled").arg == "disabled"
    with pytest.raises(SlashError):
        parse_slash("/think default sometimes")
    line = describe_context_event(
        "thinking_default", {"mode": "enabled", "previous": "adaptive", "recompute_tokens": 1234}
    )
    assert "enabled" in line and "1234 tokens" in line
