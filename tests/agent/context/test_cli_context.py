"""`m3agent context` and the cache figures of `m3agent run --output-format json`, as real
subprocesses in a real git repository."""

from __future__ import annotations

import json

from m3agent.agent.prompt_cache import CacheTracker
from m3agent.app.tui.status import StatusState
from m3agent.engine.api import Usage

from ...support.cli import run_cli
from ...support.session_ops import NoCheckpoints
from ...support.settings import isolated_settings

FILES = {
    "AGENTS.md": "Use tabs.\n",
    "main.py": "def main():\n    print('hi')\n",
    "poetry.lock": "# lock\n",
    "img.png": b"\x89PNG\r\n\x1a\n\x00\x00",
}


def test_context_command_json_and_text(make_repo, tmp_path):
    repo = make_repo(FILES)
    r = run_cli(tmp_path / "home", "context", "--json", "--cwd", str(repo))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    st = {f["path"]: f for f in d["files"]}
    assert st["main.py"]["status"] == "included" and st["main.py"]["tokens"] > 0
    assert st["poetry.lock"]["reason"] == "lock file" and st["img.png"]["reason"] == "binary"
    assert st["AGENTS.md"]["status"] == "instructions" and d["instructions"] == "AGENTS.md"
    assert d["budget_tokens"] == 1_048_576 - 32_768 and d["tokens"] < 200
    assert len(d["content_hash"]) == 64
    r2 = run_cli(tmp_path / "home", "context", "--cwd", str(repo), "--budget", "30", "--files")
    assert r2.returncode == 0, r2.stderr
    assert "of 30 tokens" in r2.stdout and "listed" in r2.stdout
    bad = run_cli(tmp_path / "home", "context", "--cwd", str(tmp_path / "nope"))
    assert (
        bad.returncode == 2 and bad.stderr.startswith("error: ") and "not a directory" in bad.stderr
    )
    assert len(bad.stderr.strip().splitlines()) == 1


def test_run_json_reports_snapshot_and_cache(make_repo, tmp_path):
    repo = make_repo(FILES)
    ns = "]<]minimax[>["
    script = tmp_path / "s.json"
    script.write_text(
        json.dumps(
            [
                f'</mm:think>{ns}<tool_call>\n{ns}<invoke name="read_file">{ns}<path>main.py{ns}</path>'
                f"{ns}</invoke>\n{ns}</tool_call>",
                "</mm:think>It prints hi.",
            ]
        )
    )
    r = run_cli(
        tmp_path / "home",
        "run",
        "what does main do?",
        "--engine",
        "scripted",
        "--script",
        str(script),
        "--output-format",
        "json",
        "--approval",
        "never",
        "--cwd",
        str(repo),
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["context"][0]["action"] == "snapshot" and d["context"][0]["files"] == 1
    first, second = d["requests"]
    assert first["cache_miss_reason"] == "first request"
    assert second["cache_miss_reason"] is None and second["cached_prompt_tokens"] > 0
    assert second["recomputed_prompt_tokens"] == (
        second["prompt_tokens"] - second["cached_prompt_tokens"]
    )
    assert d["usage"]["recomputed_prompt_tokens"] == sum(
        q["recomputed_prompt_tokens"] for q in d["requests"]
    )


def test_tracker_and_status_bar():
    t = CacheTracker()
    u1 = t.annotate(Usage(prompt_tokens=1000, cached_prompt_tokens=0))
    assert u1.cache_miss_reason == "first request"
    u2 = t.annotate(Usage(prompt_tokens=1100, cached_prompt_tokens=896))
    assert u2.cache_miss_reason is None  # 1000 // 128 * 128 = 896 pages were reusable
    t.note("compaction")
    u3 = t.annotate(Usage(prompt_tokens=500, cached_prompt_tokens=384))
    assert u3.cache_miss_reason == "compaction"
    u4 = t.annotate(Usage(prompt_tokens=600, cached_prompt_tokens=0))
    assert u4.cache_miss_reason.startswith("unknown")
    assert CacheTracker(resumed=True).annotate(Usage(300, 0)).cache_miss_reason == (
        "engine restarted"
    )
    bar = StatusState().with_usage(u3).render()
    assert "miss: compaction" in bar
    assert "miss" not in StatusState().with_usage(u1).render()
    t2 = CacheTracker(auto_compact_tokens=1000)
    t2.annotate(Usage(prompt_tokens=950, generated_tokens=60))
    assert t2.wants_compaction()


def test_run_text_mode_reports_the_snapshot(make_repo, tmp_path):
    repo = make_repo(FILES)
    script = tmp_path / "s.json"
    script.write_text(json.dumps(["</mm:think>Hello."]))
    r = run_cli(
        tmp_path / "home",
        "run",
        "hi",
        "--engine",
        "scripted",
        "--script",
        str(script),
        "--approval",
        "never",
        "--cwd",
        str(repo),
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "Hello.\n"
    assert "(repository snapshot taken: 1 files, " in r.stderr


def test_a_resumed_hit_on_the_logged_pages_is_no_miss():
    """A warm engine after a resume: the pages of the log's last request are reusable."""
    warm = CacheTracker(resumed=True, last_sequence_tokens=1000)
    assert (
        warm.annotate(Usage(prompt_tokens=1100, cached_prompt_tokens=896)).cache_miss_reason is None
    )
    cold = CacheTracker(resumed=True, last_sequence_tokens=1000)
    assert cold.annotate(Usage(prompt_tokens=1100, cached_prompt_tokens=0)).cache_miss_reason == (
        "engine restarted"
    )


def test_resume_on_the_same_warm_engine_reports_no_miss(make_repo, tmp_path):
    """Through the real session log: the resumed session's first request hits the pages the
    first session left in the (still running) engine, and says no miss; a new engine misses."""
    import asyncio

    from m3agent.app.factory import build_session
    from m3agent.engine.backends.scripted import ScriptedEngine

    repo = make_repo({"a.py": "x = 1\n" * 200})
    settings = isolated_settings(tmp_path, engine="scripted", approval="never")

    def one_turn(engine, resume=None):
        session = build_session(
            settings, cwd=repo, engine=engine, resume=resume, checkpoints=NoCheckpoints()
        )

        async def go():
            done = await session.run_prompt("next?")
            await session.close()
            return done

        asyncio.run(go())
        return session, session.cache.history[-1]

    warm = ScriptedEngine(["</mm:think>one", "</mm:think>two"])
    first, _ = one_turn(warm)
    _, resumed = one_turn(warm, resume=first.conversation.meta.id)
    assert resumed.cached_prompt_tokens > 0 and resumed.cache_miss_reason is None
    _, cold = one_turn(ScriptedEngine(["</mm:think>three"]), resume=first.conversation.meta.id)
    assert cold.cache_miss_reason == "engine restarted"


def test_context_refuses_root_and_home_as_run_does(tmp_path):
    """Issue 37 item 4: `m3agent context` in / or in ~ is one line and exit 2 (it crashed on
    /proc in /, and set out to read the whole home), the same refusal as `run`."""
    import os
    import subprocess

    from ...support.cli import CONSOLE_SCRIPT, cli_env

    home = tmp_path / "me"
    home.mkdir()
    env = {**cli_env(tmp_path / "m3home"), "HOME": str(home)}
    for where in ("/", str(home)):
        r = subprocess.run(
            [*CONSOLE_SCRIPT, "context", "--quiet"], cwd=where, env=env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert r.returncode == 2 and r.stdout == "", r.stderr
        real = os.path.realpath(where)
        assert r.stderr == (
            f"error: refusing to start in {real}: it is "
            + ("the root directory" if where == "/" else "your home directory")
            + ", and the whole of it would become the workspace; start in a project "
            "directory, or pass --allow-home to insist\n"
        )
