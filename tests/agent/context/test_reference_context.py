"""The repository context survives the REAL M3 chat template: a real session in a temp git
repo (real factory, session, loop, tools, scripted engine emitting M3 markup), every request
the agent sent rendered with ../shared/m3/reference/chat_template.jinja through transformers,
and the snapshot, AGENTS.md, the system prompt, the compaction summary and a refreshed
snapshot found in the prompt the model would see."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from m3_reference import Prose, reference_source, render_reference, render_reference_split
from m3agent.agent import events as ev
from m3agent.agent.compaction import REFRESH_NOTE, SUMMARY_HEADER
from m3agent.agent.context import SNAPSHOT_OPEN
from m3agent.agent.ops import Compact, UserTurn
from m3agent.app.factory import build_session
from m3agent.engine.backends.scripted import ScriptedEngine
from m3agent.engine.m3.chat_template import render_prompt

from ...support.session_ops import NoCheckpoints
from ...support.settings import isolated_settings

NS = "]<]minimax[>["


def invoke(name: str, **params: str) -> str:
    body = "".join(f"{NS}<{k}>{v}{NS}</{k}>" for k, v in params.items())
    return f'</mm:think>{NS}<tool_call>\n{NS}<invoke name="{name}">{body}{NS}</invoke>\n{NS}</tool_call>'


class Recording(ScriptedEngine):
    """The scripted engine; it also keeps every request the agent sent."""

    def __init__(self, *a, **kw):
        self.requests = []
        super().__init__(*a, **kw)

    async def stream(self, request):
        self.requests.append(request)
        async for d in super().stream(request):
            yield d


async def drive(session, ops_in, repo):
    seen = []
    stream = session.events()
    for op in ops_in:
        if callable(op):
            op()
            continue
        session.submit(op)
        async for e in stream:
            seen.append(e)
            if isinstance(op, UserTurn) and isinstance(e, ev.TurnComplete):
                break
            if isinstance(op, Compact) and (
                isinstance(e, ev.Error)
                or (isinstance(e, ev.ContextEvent) and e.action in ("compact", "refresh"))
            ):
                break
    await session.close()
    return seen


def test_snapshot_and_later_context_reach_the_model_under_the_real_template(make_repo, tmp_path):
    source = reference_source()
    repo = make_repo(
        {
            "AGENTS.md": "Always run pytest -q before answering. MARKER-AGENTS-7731\n",
            "calc.py": "def add(a, b):\n    return a - b  # MARKER-CALC-OLD\n",
            "notes/design.md": "The store keeps MARKER-DESIGN-0042 entries.\n",
        }
    )
    engine = Recording(
        [
            invoke("read_file", path="calc.py"),
            "</mm:think>add() subtracts.",
            "</mm:think>SUMMARY-MARKER-5150: the user asked about add().",  # compaction summary
            "</mm:think>Still subtracts.",
            "</mm:think>SUMMARY-MARKER-6060 after refresh.",  # the refresh's summary call
            "</mm:think>Now it adds.",
        ]
    )
    settings = isolated_settings(tmp_path, engine="scripted", approval="never", thinking="enabled")
    session = build_session(settings, cwd=repo, engine=engine, checkpoints=NoCheckpoints())
    system_prompt = session.messages[0].content
    assert session.messages[1].content.startswith(SNAPSHOT_OPEN)

    def edit():
        (repo / "calc.py").write_text("def add(a, b):\n    return a + b  # MARKER-CALC-NEW\n")

    seen = asyncio.run(
        drive(
            session,
            [
                UserTurn("what does add do?"),
                Compact(),
                UserTurn("and now?"),
                edit,
                Compact(refresh_snapshot=True),
                UserTurn("after the refresh?"),
            ],
            repo,
        )
    )
    assert not [e for e in seen if isinstance(e, ev.Error)]
    reqs = engine.requests
    assert len(reqs) == 6
    theirs, ours = Prose.of_reference(source), Prose.of_ours()
    prompts = []
    for r in reqs:
        # one leading system message; nothing later is sent as system
        assert r.messages[0].role == "system"
        assert all(m.role != "system" for m in r.messages[1:])
        # the session's starting default is in the system block; the turn's is the prefix
        assert r.session_thinking_mode == "enabled"
        msgs, tools = list(r.messages), list(r.tools)
        prompt = render_reference_split(
            source, msgs, tools, r.thinking_mode, r.session_thinking_mode, True
        )
        prompts.append(prompt)
        # and our renderer builds the same prompt (prose aside) from the same parsed messages;
        # with raw_text it writes the model's exact output instead (prefix caching)
        parsed = [replace(m, raw_text=None) for m in msgs]
        assert ours.normalize(
            render_prompt(
                parsed,
                tools,
                r.thinking_mode,
                session_thinking_mode=r.session_thinking_mode,
            )
        ) == theirs.normalize(prompt)
        assert system_prompt.strip().splitlines()[0] in prompt
        assert "MARKER-AGENTS-7731" in prompt and "MARKER-DESIGN-0042" in prompt
        assert prompt.count(SNAPSHOT_OPEN) == 1

    # request 4 is the refresh's own summary call, built before the snapshot is replaced
    before_refresh, after_refresh = prompts[:5], prompts[5:]
    assert all("MARKER-CALC-OLD" in p for p in before_refresh)
    assert all("MARKER-CALC-NEW" in p and "MARKER-CALC-OLD" not in p for p in after_refresh)
    # the tool result (read_file's output) is in the next prompt as tool text
    assert (
        "]~b]tool\n<response>" in prompts[1]
        and "MARKER-CALC-OLD" in prompts[1].split("]~b]tool", 1)[1]
    )
    # the compaction summary reaches the model as user text, after it and after the refresh
    assert SUMMARY_HEADER.strip() in prompts[3] and "SUMMARY-MARKER-5150" in prompts[3]
    assert "SUMMARY-MARKER-6060" in prompts[5]
    assert REFRESH_NOTE.strip() in prompts[5].split("]~b]user\n", 1)[1]  # user text
    # ... where the old layout (snapshot as a second system message) loses it entirely
    old = [session.messages[0], session.messages[1]]
    lost = render_reference(source, [*old, *reqs[5].messages[1:]], [], "enabled", True)
    assert "MARKER-CALC-NEW" not in lost and "MARKER-AGENTS-7731" not in lost
