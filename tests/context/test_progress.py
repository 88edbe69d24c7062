"""Snapshot progress: files listed, files read and tokens counted reach the caller as Progress
events while build_snapshot works on a real git repository, a few per second at most."""

from __future__ import annotations

from m3agent.agent.context import SnapshotConfig, build_snapshot
from m3agent.agent.context_files import SnapshotProgress
from m3agent.agent.events import Progress, ProgressStage


def repo_files(n: int) -> dict[str, str]:
    files = {f"pkg/mod{i:03}.py": f"def f{i}(x):\n    return x + {i}\n" for i in range(n)}
    files["README.md"] = "# demo\n\nA repository for the progress test.\n"
    files["logo.png"] = "\x89PNG not really"  # skipped by name: not counted as a candidate
    return files


def test_snapshot_reports_listing_reading_and_tokens(make_repo, tokenizer):
    root = make_repo(repo_files(40))
    seen: list[Progress] = []
    snap = build_snapshot(root, tokenizer, SnapshotConfig(budget_tokens=100_000),
                          progress=seen.append)
    assert seen and all(p.stage == ProgressStage.SNAPSHOT for p in seen)
    first, last = seen[0], seen[-1]
    # The listing is reported before any file is read: 40 modules and the README.
    assert (first.done, first.total, first.unit) == (0, 41, "files")
    assert "41 files listed" in first.message
    assert last.final and not any(p.final for p in seen[:-1])
    assert (last.done, last.total) == (41, 41)
    assert f"{snap.tokens:,} tokens" in last.message and snap.tokens > 0
    assert [p.done for p in seen] == sorted(p.done for p in seen)  # never goes back
    assert last.fraction == 1.0


def test_snapshot_without_a_callback_is_the_same_snapshot(make_repo, tokenizer):
    root = make_repo(repo_files(5))
    config = SnapshotConfig(budget_tokens=100_000)
    assert build_snapshot(root, tokenizer, config).text == build_snapshot(
        root, tokenizer, config, progress=lambda p: None).text


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
