"""The TUI's status bar shows a slow prefill's progress (issue 22): the real tiny M3 on the
CPU, in-process, a long typed prompt prefilled in several chunks; the bar says how far, and
goes back to the decode speed once the answer starts. The bar's updates are recorded as they
are made, and the 1 s threshold is set to 0 (tests/agent/test_prefill_progress.py tests it):
what is shown does not depend on this machine's speed."""

from __future__ import annotations

import pytest
from pilot_steps import send

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
PROMPT = "Summarise this text. " + "The quick brown fox jumps over the lazy dog. " * 160


@pytest.fixture(scope="module")
def tiny_m3_dir(tmp_path_factory):
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    path = tmp_path_factory.mktemp("tiny_m3")
    init_tiny(path, TinySpec(layers=2, hidden=128, heads=2, kv_heads=1, experts=2, seed=1))
    return path


async def test_status_bar_shows_prefill_progress(harness, until, tiny_m3_dir, monkeypatch):
    from m3agent.agent.config import AgentConfig
    from m3agent.agent.session import Session
    from m3agent.app.tui.app import create_app
    from m3agent.engine.api import SamplingParams
    from m3agent.engine.backends.native import NativeEngine
    from m3agent.engine.native.core.engine_config import EngineConfig

    # Shown from the first chunk whatever this machine's speed: the 1 s rule itself is
    # tests/agent/test_prefill_progress.py's; here, what the bar shows.
    monkeypatch.setattr("m3agent.agent.prefill_progress.SHOW_AFTER_S", 0.0)

    def factory(resume_id, progress):
        engine = NativeEngine.from_model_dir(
            tiny_m3_dir, config=EngineConfig(max_num_batched_tokens=256)
        )
        config = AgentConfig(
            approval_policy="never",
            system_prompt="You are m3agent under test.",
            sampling=SamplingParams(max_tokens=2),
        )
        return Session.create(
            engine, None, config, sessions_dir=harness.home / "sessions", cwd=harness.repo
        )

    app = create_app(factory, harness.config(approval="never"))
    seen: list[str] = []
    async with app.run_test(size=(160, 30)) as pilot:
        main = app.main
        await until(pilot, lambda: main.status.state == "ready", timeout=240)
        # Every status the bar is given, recorded as it is set: on a fast machine the whole
        # prefill can be over before a poll after the key press would see it.
        set_status = main.set_status

        def recording(**changes):
            set_status(**changes)
            if "prefill" in (line := main.status.render()):
                seen.append(line)

        monkeypatch.setattr(main, "set_status", recording)
        await send(pilot, PROMPT)

        def prefill_shown() -> bool:
            return len(seen) >= 2

        await until(pilot, prefill_shown, timeout=240)
        await until(pilot, lambda: main.controller.completed_turns >= 1, timeout=240)
        final = main.status.render()
        await main.controller.session.engine.close()
    assert any("tokens" in s and "tok/s" in s and "left" in s for s in seen), seen
    assert "prefill" not in final and "tok/s" in final
