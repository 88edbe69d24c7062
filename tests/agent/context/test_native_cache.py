"""Cached-token counts on the native engine with a tiny random M3: exactly the whole 128-token
pages that the request shares with an earlier sequence (prompt + computed output), through a
session with a repository snapshot, edits and a compaction."""

from __future__ import annotations

import asyncio

import pytest
from m3agent.agent import events as ev
from m3agent.agent.ops import Compact, UserTurn
from m3agent.app.factory import build_session
from m3agent.engine.backends.scripted import common_prefix_len

from ...support.native import recording_engine, tiny_m3
from ...support.session_ops import NoCheckpoints, drive
from ...support.settings import isolated_settings

PAGE = 128


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return tiny_m3(tmp_path_factory.mktemp("tiny_m3"), seed=5)


async def drive_and_close(session, ops_in):
    seen = await drive(session, ops_in)
    await session.engine.close()
    return seen


def test_cached_tokens_exact_on_native(tiny_dir, make_repo, tmp_path):
    from m3agent.engine.m3.chat_template import ChatTemplate, render_prompt_parts
    from m3agent.engine.m3.tokenizer import M3Tokenizer

    repo = make_repo(
        {
            "AGENTS.md": "Keep answers short.\n",
            "pkg/core.py": "class Store:\n    def get(self, k):\n        return k\n" * 12,
            "pkg/use.py": "from pkg.core import Store\n\nSTORE = Store()\n" * 6,
        }
    )
    engine = recording_engine(tiny_dir, num_gpu_blocks=600)
    settings = isolated_settings(
        tmp_path,
        engine="native",
        model=str(tiny_dir),
        approval="never",
        thinking="disabled",
        max_tokens=12,
        context_budget=4000,
    )
    session = build_session(settings, cwd=repo, engine=engine, checkpoints=NoCheckpoints())
    seen = asyncio.run(
        drive_and_close(
            session,
            [
                UserTurn("Summarise pkg/core.py."),
                UserTurn("And pkg/use.py?"),
                Compact(),
                UserTurn("Anything else?"),
                UserTurn("Thanks."),
            ],
        )
    )
    errors = [e for e in seen if isinstance(e, ev.Error)]
    assert not errors, errors
    tok = M3Tokenizer.from_model_dir(tiny_dir)
    tmpl = ChatTemplate.from_model_dir(tiny_dir)
    stats = engine.stats()
    sequences: list[list[int]] = []
    usages = {}
    for e in seen:
        if isinstance(e, ev.ModelRequestFinished):
            usages[len(usages)] = e.usage
    assert len(engine.requests) == 5  # four turns' requests and the compaction's summary call
    expect_each = []  # each request's whole pages shared with an earlier sequence
    for n, req in enumerate(engine.requests):
        ids = tok.encode_parts(
            render_prompt_parts(
                list(req.messages),
                list(req.tools),
                req.thinking_mode,
                template=tmpl,
                session_thinking_mode=req.session_thinking_mode,
            )
        )
        best = max((common_prefix_len(s, ids) for s in sequences), default=0)
        expected = min(best // PAGE, (len(ids) - 1) // PAGE) * PAGE
        gen = engine.generated[req.request_id]
        sequences.append(ids + gen[:-1])  # the last sampled token is never computed
        expect_each.append(expected)
        if n == 0:
            assert expected == 0
        if n in (1, 2):  # plain appends: everything but the new tokens and one page is a hit
            assert len(ids) - expected <= (len(ids) - len(sequences[n - 1][:best])) + PAGE
    reported = [u.cached_prompt_tokens for u in usages.values()]
    cached_total = sum(expect_each)
    assert stats.cached_prompt_tokens == cached_total, (reported, cached_total)
    # Per request too: the session's four requests are 0, 1, 3, 4 of the engine's five.
    assert reported == [expect_each[i] for i in (0, 1, 3, 4)]
    # The snapshot (a few thousand tokens) stays cached across the compaction.
    assert reported[2] >= 3000
    # A miss (fewer cached tokens than the last request's whole pages) is put on the compaction.
    lost = reported[2] < usages[1].prompt_tokens // PAGE * PAGE
    assert usages[2].cache_miss_reason == ("compaction" if lost else None)
    assert usages[0].cache_miss_reason == "first request"
    assert usages[1].cache_miss_reason is None and usages[3].cache_miss_reason is None
