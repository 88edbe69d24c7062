"""A generated git repository of 10,000 files: the snapshot and `m3agent context --json` handle
it within the budget and in seconds (figures printed with -s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from m3agent.agent.context import SnapshotConfig, build_snapshot


def generate(root, n_files: int = 10_000) -> dict[str, int]:
    kinds = {"source": 0, "vendored": 0, "binary": 0, "lock": 0}
    for i in range(n_files):
        if i % 40 == 1:
            rel, data, kind = f"node_modules/p{i}/index.js", b"module.exports = 1;\n", "vendored"
        elif i % 40 == 2:
            rel, data, kind = f"assets/img{i}.png", b"\x89PNG\r\n\x1a\n\x00\x00" * 8, "binary"
        elif i % 400 == 3:
            rel, data, kind = f"svc{i}/Cargo.lock", b"# lock\n", "lock"
        else:
            d = f"pkg{i % 97:02d}/sub{i % 7}"
            callee = f"helper_{(i * 7919) % n_files}"
            body = (
                f"from pkg.shared import {callee}\n\n\n"
                f'def helper_{i}(x):\n    """Step {i}: calls {callee}."""\n'
                f"    return {callee}(x) + {i}\n"
            )
            rel, data, kind = f"{d}/mod_{i}.py", body.encode(), "source"
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        kinds[kind] += 1
    return kinds


def test_ten_thousand_files(tmp_path, tokenizer):
    root = tmp_path / "big"
    root.mkdir()
    kinds = generate(root)
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "HOME": str(tmp_path),
        "PATH": os.environ["PATH"],
    }
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)

    budget = 100_000
    t0 = time.perf_counter()
    s = build_snapshot(root, tokenizer, SnapshotConfig(budget))
    took = time.perf_counter() - t0
    included, listed = s.entries("included"), s.entries("listed")
    skipped = s.entries("skipped")
    print(
        f"\n10k files: {took:.2f} s, {s.tokens} tokens, {len(included)} included, "
        f"{len(listed)} listed, {len(skipped)} skipped, {len(s.text)} chars"
    )
    assert len(s.files) == 10_000
    assert len(skipped) == kinds["vendored"] + kinds["binary"] + kinds["lock"]
    assert len(included) + len(listed) == kinds["source"]
    assert s.tokens <= budget and len(tokenizer.encode_text(s.text)) <= budget * 1.01
    assert took < 60, took

    # The command a user runs on every start: a real subprocess, JSON out; warm cache is fast.
    home = tmp_path / "home"
    cmd = [
        sys.executable,
        "-m",
        "m3agent.app.cli",
        "context",
        "--json",
        "--cwd",
        str(root),
        "--budget",
        str(budget),
    ]
    run_env = {**os.environ, "M3AGENT_HOME": str(home)}
    run_env.pop("M3AGENT_CONFIG", None)
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        r = subprocess.run(cmd, capture_output=True, text=True, env=run_env, timeout=300)
        times.append(time.perf_counter() - t0)
        assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    print(
        f"m3agent context --json: cold {times[0]:.2f} s, warm {times[1]:.2f} s, "
        f"build (warm) {report['build_time_s']:.2f} s"
    )
    assert report["content_hash"] == s.content_hash
    assert report["files_included"] == len(included)
    assert {f["status"] for f in report["files"]} == {"included", "listed", "skipped"}
    assert times[1] < 30
