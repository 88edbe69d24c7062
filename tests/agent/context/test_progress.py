"""Snapshot progress: files listed, files read and tokens counted reach the caller as Progress
events while build_snapshot works on a real git repository, a few per second at most."""

from __future__ import annotations

from m3agent.agent.context import SnapshotConfig, build_snapshot
from m3agent.agent.context.progress import SnapshotProgress
from m3agent.agent.events import Progress, ProgressStage

from ...support.session_ops import NoCheckpoints
from ...support.settings import isolated_settings


def repo_files(n: int) -> dict[str, str]:
    files = {f"pkg/mod{i:03}.py": f"def f{i}(x):\n    return x + {i}\n" for i in range(n)}
    files["README.md"] = "# demo\n\nA repository for the progress test.\n"
    files["logo.png"] = "\x89PNG not really"  # skipped by name: not counted as a candidate
    return files


def test_snapshot_reports_listing_reading_and_tokens(make_repo, tokenizer):
    root = make_repo(repo_files(40))
    seen: list[Progress] = []
    snap = build_snapshot(
        root, tokenizer, SnapshotConfig(budget_tokens=100_000), progress=seen.append
    )
    assert seen and all(p.stage == ProgressStage.SNAPSHOT for p in seen)
    first, last = seen[0], seen[-1]
    # The listing is reported before any file is read: 40 modules and the README.
    assert (first.done, first.total, first.unit) == (0, 41, "files")
    assert "0/41 files read (0.0 MB)" in first.message
    assert last.final and not any(p.final for p in seen[:-1])
    assert (last.done, last.total) == (41, 41)
    assert f"{snap.tokens:,} tokens" in last.message and snap.tokens > 0
    assert [p.done for p in seen] == sorted(p.done for p in seen)  # never goes back
    assert last.fraction == 1.0


def test_snapshot_without_a_callback_is_the_same_snapshot(make_repo, tokenizer):
    root = make_repo(repo_files(5))
    config = SnapshotConfig(budget_tokens=100_000)
    assert (
        build_snapshot(root, tokenizer, config).text
        == build_snapshot(root, tokenizer, config, progress=lambda p: None).text
    )


def test_updates_are_throttled_but_the_listing_and_the_end_always_come():
    now = [0.0]
    seen: list[Progress] = []
    tally = SnapshotProgress(seen.append, interval_s=0.1, clock=lambda: now[0])
    tally.listed_files(10_000)
    for _ in range(10_000):  # all within the same instant: one update would be plenty
        tally.read_file()
    now[0] = 0.5
    tally.read_file()  # time has passed: reported
    tally.counted(1234)  # right after: not reported
    tally.done(99_999)
    assert [(p.done, p.final) for p in seen] == [(0, False), (10_001, False), (10_001, True)]
    assert "99,999 tokens" in seen[-1].message


def test_a_refresh_reports_progress_in_the_session_stream_not_in_its_log(make_repo, tmp_path):
    """Opening: the factory's callback; a refresh inside the session: Progress events in the
    session's own stream (the session log keeps only what a resume needs)."""
    import asyncio
    import json

    from m3agent.agent import events as ev
    from m3agent.agent.ops import Compact, UserTurn
    from m3agent.app.factory import build_session
    from m3agent.engine.backends.scripted import ScriptedEngine

    repo = make_repo(repo_files(12))
    settings = isolated_settings(tmp_path, engine="scripted", approval="never", thinking="disabled")
    engine = ScriptedEngine(["</mm:think>ok", "</mm:think>summary", "</mm:think>ok again"])
    opening: list[Progress] = []
    session = build_session(
        settings, cwd=repo, engine=engine, checkpoints=NoCheckpoints(), progress=opening.append
    )
    assert opening[0].total == 13 and opening[-1].final and opening[-1].done == 13

    async def drive() -> list:
        seen: list = []
        stream = session.events()
        for op in (UserTurn("hi"), Compact(refresh_snapshot=True)):
            session.submit(op)
            async for e in stream:
                seen.append(e)
                if isinstance(e, ev.TurnComplete) or (
                    isinstance(e, ev.ContextEvent) and e.action == "refresh"
                ):
                    break
        await session.close()
        return seen

    seen = asyncio.run(drive())
    progress = [e for e in seen if isinstance(e, ev.Progress)]
    assert progress and progress[-1].final and progress[-1].done == 13
    refresh_at = next(
        i for i, e in enumerate(seen) if isinstance(e, ev.ContextEvent) and e.action == "refresh"
    )
    assert all(seen.index(p) < refresh_at for p in progress)  # before the refresh's report
    assert progress[-1].to_dict()["stage"] == "snapshot"
    log = (settings.sessions_dir / f"{session.id}.jsonl").read_text()
    assert '"type": "progress"' not in log and '"progress"' not in json.dumps(
        [json.loads(line).get("type") for line in log.splitlines()]
    )
