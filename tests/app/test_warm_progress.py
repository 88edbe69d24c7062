"""Progress outside the snapshot: the native loader's bytes, their way from a background
server's log back to the waiting run, and the stderr line of `m3agent run` (rewritten in place
on a terminal, absent in a pipe), checked on the installed console script under a real pty."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.agent.events import Progress, ProgressStage
from m3agent.app.progress_line import ProgressLine
from m3agent.app.warm import LoadRelay, load_log_writer, load_progress

from ..support.cli import run_stderr_on_a_pty, scripted_run

M3AGENT = Path(sys.executable).parent / "m3agent"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from m3agent.engine.native.loaders.tiny import TinySpec, init_tiny

    path = tmp_path_factory.mktemp("tiny_m3")
    init_tiny(path, TinySpec(layers=2, hidden=128, heads=2, kv_heads=1, experts=2, vocab=512))
    return path


def test_native_loader_reports_bytes_up_to_the_checkpoint_size(tiny):
    from m3agent.engine.native.loaders.checkpoint import load_model, safetensors_files

    calls: list[tuple[int, int]] = []
    load_model(tiny, progress=lambda done, total: calls.append((done, total)))
    total = sum(f.stat().st_size for f in safetensors_files(tiny))
    assert len(calls) > 3 and {t for _, t in calls} == {total}
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    assert calls[-1] == (total, total) and all(d < total for d, _ in calls[:-1])


def test_load_lines_in_a_server_log_come_back_as_progress(tmp_path):
    log_path = tmp_path / "serve.log"
    seen: list[Progress] = []
    relay = LoadRelay(log_path, seen.append)
    relay.poll()  # no log yet: nothing, no error
    with log_path.open("w") as log:
        write = load_log_writer(log, interval_s=0.0)
        log.write("some other line\n")
        write(load_progress(1_000, 4_000_000))
        write(Progress(stage=ProgressStage.SNAPSHOT, message="not a load line"))
        relay.poll()
        relay.poll()  # unchanged: not reported twice
        write(load_progress(4_000_000, 4_000_000))
        relay.poll()
    assert [(p.done, p.total, p.final) for p in seen] == [
        (1_000, 4_000_000, False),
        (4_000_000, 4_000_000, True),
    ]
    assert seen[-1].stage == ProgressStage.MODEL_LOAD and "100%" in seen[-1].message


def test_load_log_writer_is_throttled_except_for_the_last_line():
    out = io.StringIO()
    now = [0.0]
    write = load_log_writer(out, interval_s=0.5, clock=lambda: now[0])
    for done in range(0, 100, 10):
        write(load_progress(done, 100))
    write(load_progress(100, 100))
    assert out.getvalue().splitlines() == [
        "m3agent serve: loading weights 0% (0 of 100 bytes)",
        "m3agent serve: loading weights 100% (100 of 100 bytes)",
    ]


def test_progress_line_on_a_terminal_and_elsewhere():
    snap = [
        Progress(stage=ProgressStage.SNAPSHOT, message=f"snapshot {i}", done=i, total=2)
        for i in range(2)
    ]
    done = Progress(stage=ProgressStage.SNAPSHOT, message="snapshot done", final=True)
    server = Progress(stage=ProgressStage.SERVER, message="using m3agent serve", final=True)
    tty = io.StringIO()
    line = ProgressLine(tty, tty=True)
    for p in (*snap, server, done):
        line(p)
    # each update rewrites the line; a server notice first erases an unfinished one
    assert tty.getvalue() == (
        "\r\x1b[Ksnapshot 0\r\x1b[Ksnapshot 1\r\x1b[K"
        "m3agent: using m3agent serve\n\r\x1b[Ksnapshot done\n"
    )
    pipe = io.StringIO()
    line = ProgressLine(pipe, tty=False)
    for p in (*snap, server, done):
        line(p)
    line.close()
    assert pipe.getvalue() == "m3agent: using m3agent serve\n"  # counters stay out of logs
    hostile = io.StringIO()
    ProgressLine(hostile, tty=True)(
        Progress(stage=ProgressStage.SNAPSHOT, message="evil\x1b]0;title\x07 name", final=True)
    )
    assert "\x1b]" not in hostile.getvalue() and "\x07" not in hostile.getvalue()


def _run_scripted(tmp_path: Path, repo: Path, stderr_tty: bool) -> tuple[int, str, str]:
    home = tmp_path / ("home-tty" if stderr_tty else "home-pipe")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["</mm:think>hello"]))
    env = {**os.environ, "M3AGENT_HOME": str(home), "COLUMNS": "200"}
    env.pop("M3AGENT_CONFIG", None)
    cmd = [str(M3AGENT), *scripted_run("hi", script, repo)]
    if not stderr_tty:
        r = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
        )
        return r.returncode, r.stdout, r.stderr
    return run_stderr_on_a_pty(cmd, env, quiet_s=60)


def test_run_shows_snapshot_progress_only_on_a_terminal(make_repo, tmp_path):
    repo = make_repo({f"src/m{i}.py": f"X = {i}\n" for i in range(30)})
    code, out, err = _run_scripted(tmp_path, repo, stderr_tty=True)
    assert code == 0 and "hello" in out
    assert "\r\x1b[Krepository snapshot: 0/30 files read (0.0 MB), 0 tokens, " in err
    final = err.split("\r\x1b[K")[-1]
    assert final.startswith("repository snapshot: 30/30 files read (0.0 MB), ")
    assert " s\r\n" in final or " s\n" in final  # elapsed; left standing, then a new line
    code, out, err = _run_scripted(tmp_path, repo, stderr_tty=False)
    assert code == 0 and "hello" in out
    # no rewritten line; plain lines only if the snapshot took more than a second
    assert "\x1b[K" not in err
    lines = [ln for ln in err.splitlines() if "files read" in ln]
    assert all(ln.startswith("m3agent: repository snapshot: ") for ln in lines)
    assert "m3agent serve" not in err  # the scripted engine stays in process
