"""Fixtures for the TUI tests: a temporary git repository, M3AGENT_HOME in a temp dir, and
apps built through `create_app` over a real Session and the real ScriptedEngine (its raw M3
text goes through the real parsers; the only addition is a record of the requests and an
optional pause point, so a test can look at the screen mid-answer)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from m3agent.engine.api import Usage, UsageDelta
from sandbox_support import world  # noqa: F401  (the sandbox tests' fixture, tests/tools)

NS = "]<]minimax[>["


def edit_call(path: str, old: str, new: str) -> str:
    """Raw M3 text of one edit_file call, as the model writes it (SPEC 4.2)."""
    return (
        f'I will fix it.\n{NS}<tool_call>\n{NS}<invoke name="edit_file">'
        f"{NS}<path>{path}{NS}</path>{NS}<old_string>{old}{NS}</old_string>"
        f"{NS}<new_string>{new}{NS}</new_string>"
        f"{NS}</invoke>\n{NS}</tool_call>"
    )


class RecordingEngine:
    """Wraps a ScriptedEngine: every ChatRequest that reaches it is kept in `requests`;
    with `pause_after=N` the stream stops after N deltas until `resume()`."""

    def __init__(
        self, inner: Any, pause_after: int | None = None, fixed_usage: bool = False
    ) -> None:
        self.inner = inner
        # Snapshots must depend neither on the clock nor on the tokenizer and chat template
        # (owned elsewhere, and changing): report fixed usage figures instead of measured ones.
        self.fixed_usage = fixed_usage
        self.requests: list[Any] = []
        self.pause_after = pause_after
        self.paused = asyncio.Event()
        self._go = asyncio.Event()
        self.aborted: list[str] = []

    def info(self):
        return self.inner.info()

    def stats(self):
        return self.inner.stats()

    async def abort(self, request_id: str) -> None:
        self.aborted.append(request_id)
        await self.inner.abort(request_id)

    async def close(self) -> None:
        await self.inner.close()

    def resume(self) -> None:
        self._go.set()

    async def stream(self, request):
        self.requests.append(request)
        n = 0
        async for delta in self.inner.stream(request):
            if self.pause_after is not None and n == self.pause_after:
                self.paused.set()
                await self._go.wait()
            n += 1
            if self.fixed_usage and isinstance(delta, UsageDelta):
                usage = Usage(
                    prompt_tokens=1200 * len(self.requests),
                    cached_prompt_tokens=1024 * (len(self.requests) - 1),
                    generated_tokens=100,
                    time_to_first_token_s=0.25,
                    total_time_s=1.25,
                )
                delta = replace(delta, usage=usage)
            yield delta


class Harness:
    def __init__(self, repo: Path, home: Path) -> None:
        self.repo = repo
        self.home = home
        self.engines: list[RecordingEngine] = []

    def wrap(self, engine: Any, **kw: Any) -> RecordingEngine:
        recording = RecordingEngine(engine, **kw)
        self.engines.append(recording)
        return recording

    @property
    def engine(self) -> RecordingEngine:
        return self.engines[-1]

    def session_factory(
        self,
        script: list[str],
        *,
        approval: str = "on-request",
        chunk_delay_s: float = 0.0,
        pause_after: int | None = None,
        thinking: str = "adaptive",
        fixed_usage: bool = False,
    ) -> Callable:
        from m3agent.agent.config import AgentConfig
        from m3agent.agent.session import Session
        from m3agent.engine.backends.scripted import ScriptedEngine
        from m3agent.tools.edit_file import EditFile
        from m3agent.tools.read_file import ReadFile
        from m3agent.tools.toolset import Toolset

        def factory(resume_id: str | None, progress) -> Any:
            progress("loading scripted engine", 0.5)
            engine = RecordingEngine(
                ScriptedEngine(script, chunk_delay_s=chunk_delay_s), pause_after, fixed_usage
            )
            self.engines.append(engine)
            # A fixed system prompt and two tools: the prompt's token count (on screen in the
            # status bar) then does not move when other tools or the default prompt change.
            config = AgentConfig(
                approval_policy=approval,
                thinking_default=thinking,
                system_prompt="You are m3agent under test.",
            )
            toolset = Toolset([ReadFile(), EditFile()])
            sessions = self.home / "sessions"
            if resume_id:
                return Session.resume(
                    resume_id, engine, toolset, config, sessions_dir=sessions, cwd=self.repo
                )
            return Session.create(engine, toolset, config, sessions_dir=sessions, cwd=self.repo)

        return factory

    def config(self, **kw: Any):
        from m3agent.app.tui.ports import TuiConfig
        from m3agent.tools.sandbox.policy import SandboxLayer

        kw.setdefault("engine", "scripted")
        kw.setdefault("model", "scripted")
        kw.setdefault("sandbox_layers", (SandboxLayer.LANDLOCK, SandboxLayer.SECCOMP))
        kw.setdefault("clock", lambda: 1000.0)  # the turn timer shows 0s: stable snapshots
        return TuiConfig(cwd=self.repo, state_dir=self.home, **kw)

    def app(
        self,
        script: list[str],
        *,
        resume: str | None = None,
        approval: str = "on-request",
        chunk_delay_s: float = 0.0,
        pause_after: int | None = None,
        fixed_usage: bool = False,
        **config: Any,
    ):
        from m3agent.app.tui.app import create_app

        factory = self.session_factory(
            script,
            approval=approval,
            chunk_delay_s=chunk_delay_s,
            pause_after=pause_after,
            fixed_usage=fixed_usage,
        )
        return create_app(factory, self.config(resume=resume, approval=approval, **config))

    def factory_app(
        self, replies: list[str], *, approval: str = "never", resume: str | None = None
    ):
        """An app over app/factory's build_session, the CLI's seam (the real tools, sandbox
        and checkpoints), under the approval policy APPROVAL, with the ScriptedEngine playing
        REPLIES: one recorded engine (`self.engine`) serves every session the app opens."""
        from m3agent.app.factory import build_session
        from m3agent.app.settings import load_settings
        from m3agent.app.tui.app import create_app
        from m3agent.engine.backends.scripted import ScriptedEngine

        settings = load_settings().override(engine="scripted", approval=approval)
        engine = self.wrap(ScriptedEngine(replies))

        def factory(resume_id: str | None, progress) -> Any:
            return build_session(settings, cwd=self.repo, engine=engine, resume=resume_id)

        return create_app(factory, self.config(approval=approval, resume=resume))


@pytest.fixture
def m3home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("M3AGENT_HOME", str(home))
    return home


@pytest.fixture
def repo(make_repo) -> Path:
    return make_repo({"src/calc.py": "def add(a, b):\n    return a - b\n", "README.md": "# demo\n"})


@pytest.fixture
def harness(repo, m3home) -> Harness:
    return Harness(repo, m3home)


async def wait_until(pilot, predicate: Callable[[], bool], timeout: float = 15.0) -> None:
    """Lets the app run until predicate() holds; fails with the predicate's name otherwise."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out waiting for {getattr(predicate, '__name__', predicate)}"
            )
        await pilot.pause(0.02)


@pytest.fixture
def until():
    return wait_until


class M3Text:
    """Raw model text builders, handed to tests as a fixture (conftest is not importable
    under --import-mode=importlib)."""

    NS = NS
    edit_call = staticmethod(edit_call)

    @staticmethod
    def read_call(path: str) -> str:
        return (
            f'{NS}<tool_call>\n{NS}<invoke name="read_file">{NS}<path>{path}{NS}</path>'
            f"{NS}</invoke>\n{NS}</tool_call>"
        )

    @staticmethod
    def shell_call(command: str, preface: str = "") -> str:
        """One shell call; PREFACE is the text the model writes before it."""
        return (
            f'{preface}{NS}<tool_call>\n{NS}<invoke name="shell">'
            f"{NS}<command>{command}{NS}</command>{NS}</invoke>\n{NS}</tool_call>"
        )


@pytest.fixture
def m3text() -> type[M3Text]:
    return M3Text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio; the anyio plugin drives the async tests
