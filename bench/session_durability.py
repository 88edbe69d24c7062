"""Durability (issue 27): real `m3agent run` sessions SIGKILLed at random points, then their logs
cut at a random byte (a power cut), and every one resumed.

Each run is a real `m3agent` process (scripted engine: an edit, a shell command that sleeps, a
final answer, all with multi-byte text) killed with SIGKILL on its process group at a random
moment. Its log is then truncated at a random byte after the header line (every other one
mid-way through a multi-byte character; the header is
written whole and fsynced before the log exists, so no cut can tear it), and the session is
resumed in process through the real factory: the resume must succeed, run one more turn, and
leave a history an OpenAI-style server accepts (every tool call answered before the next
message); loading the log again must give the same history.

    python bench/session_durability.py --runs 100 --out bench/results/session_durability.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

NS = "]<]minimax[>["


def tool_call(name: str, **args: str) -> str:
    """The scripted engine's text for one M3 tool call (thinking closed first)."""
    params = "".join(f"{NS}<{k}>{v}{NS}</{k}>" for k, v in args.items())
    return (
        f'</mm:think>{NS}<tool_call>\n{NS}<invoke name="{name}">{params}'
        f"{NS}</invoke>\n{NS}</tool_call>"
    )


SCRIPT = [
    tool_call("edit_file", path="a.py", old_string="1", new_string="2  # résumé ✓"),
    tool_call("shell", command="sleep 0.3; echo 'ünïcødé 日本語 🎉'"),
    "</mm:think>all done — 完了 🚀",
]


def history_errors(messages) -> list[str]:
    """What an OpenAI-style chat server rejects: a tool call not answered before the next
    message, or a tool result that answers no call."""
    errors: list[str] = []
    pending: set[str] = set()
    for i, m in enumerate(messages):
        if m.role == "tool":
            if m.tool_call_id not in pending:
                errors.append(f"message {i}: result for {m.tool_call_id!r} answers no call")
            pending.discard(m.tool_call_id)
            continue
        if pending:
            errors.append(f"message {i}: calls {sorted(pending)} have no result")
            pending = set()
        if m.role == "assistant":
            pending = {c.id for c in m.tool_calls}
    if pending:
        errors.append(f"end: calls {sorted(pending)} have no result")
    return errors


def workspace(root: Path, n: int) -> Path:
    """root/wsN holding one a.py (the script's edit target)."""
    ws = root / f"ws{n}"
    ws.mkdir()
    (ws / "a.py").write_text("x = 1\n")
    return ws


def start_run(
    exe: Path, home: Path, script: Path, ws: Path, prompt: str = "work ✓"
) -> subprocess.Popen:
    """`m3agent run` (scripted engine, no approvals, stream-json) in its own process group,
    with home as M3AGENT_HOME; the first stdout line comes once the session log exists."""
    env = dict(os.environ, M3AGENT_HOME=str(home))
    env.pop("M3AGENT_CONFIG", None)
    return subprocess.Popen(
        [str(exe), "run", prompt, "--engine", "scripted", "--script", str(script)]
        + ["--cwd", str(ws), "--approval", "never", "--no-context"]
        + ["--output-format", "stream-json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def _resume(home: Path, sid: str, ws: Path) -> tuple[str, list[str], bool]:
    """(how the resumed turn ended, history errors, reload equal) through the real factory."""
    from m3agent.agent.conversation import Conversation
    from m3agent.agent.ops import UserTurn
    from m3agent.app.factory import build_session
    from m3agent.app.settings import Settings
    from m3agent.engine.backends.scripted import ScriptedEngine

    settings = Settings(
        home=home,
        config_path=home / "config.toml",
        engine="scripted",
        approval="never",
        context=False,
    )
    session = build_session(
        settings, resume=sid, engine=ScriptedEngine(["</mm:think>resumed fine"]), cwd=ws
    )
    last: list = []

    async def go() -> None:
        session.submit(UserTurn("continue"))
        async for e in session.events():
            if type(e).__name__ == "TurnComplete":
                last.append(e)
                break
        await session.close()

    asyncio.run(go())
    end = f"{last[0].reason}:{last[0].answer}" if last else "no TurnComplete"
    same = Conversation.load(home / "sessions", sid).messages == session.messages
    return end, history_errors(session.messages), same


def measure(root: Path, runs: int = 100, seed: int = 27, parallel: int = 4) -> dict:
    """Kills `runs` real runs at random points, cuts each log at a random byte, resumes all."""
    exe = Path(sys.executable).with_name("m3agent")
    home = root / "home"
    script = root / "script.json"
    script.write_text(json.dumps(SCRIPT, ensure_ascii=False), encoding="utf-8")
    rng = random.Random(seed)

    # A control run that is not killed: its timeline places the kill points.
    t0 = time.monotonic()
    control = start_run(exe, home, script, workspace(root, 0))
    assert control.stdout is not None and control.stdout.readline()
    opened = time.monotonic() - t0
    control.stdout.read()
    if control.wait(120) != 0:
        raise RuntimeError("the control run failed")
    span = time.monotonic() - t0 - opened
    delays = [rng.uniform(0.0, 1.2 * span) for _ in range(runs)]

    def kill_one(n: int) -> Path:
        ws = workspace(root, n + 1)
        p = start_run(exe, home, script, ws)
        assert p.stdout is not None and p.stdout.readline()  # the session log exists
        time.sleep(delays[n])
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(60)
        p.stdout.close()
        return ws

    with ThreadPoolExecutor(parallel) as pool:
        workspaces = list(pool.map(kill_one, range(runs)))
    by_cwd = {}
    for log in (home / "sessions").glob("*.jsonl"):
        by_cwd[json.loads(log.read_bytes().split(b"\n", 1)[0])["cwd"]] = log
    rows, failures = [], []
    for n, ws in enumerate(workspaces):
        log = by_cwd[str(ws)]
        data = log.read_bytes()
        header = data.index(b"\n") + 1
        # Every other cut lands mid-way through a multi-byte character (a continuation byte
        # right after it): few of a log's bytes are, so uniform cuts would rarely try it.
        inside = [k for k in range(header, len(data)) if 0x80 <= data[k] < 0xC0]
        cut = rng.choice(inside) if n % 2 == 0 and inside else rng.randint(header, len(data))
        log.write_bytes(data[:cut])
        mid_char = cut < len(data) and 0x80 <= data[cut] < 0xC0  # a continuation byte next
        try:
            end, errors, same = _resume(home, log.stem, ws)
        except Exception as e:  # a resume that fails is the finding: recorded, not raised
            end, errors, same = f"{type(e).__name__}: {e}"[:200], [], False
        row = {
            "session": log.stem,
            "log_bytes": len(data),
            "cut_at": cut,
            "mid_character": mid_char,
            "at_record_boundary": data[cut - 1 : cut] == b"\n",
            "resumed": end,
        }
        rows.append(row)
        if end != "done:resumed fine" or errors or not same:
            failures.append(row | {"history_errors": errors[:3], "reload_equal": same})
    return {
        "bench": "session_durability",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": runs,
        "seed": seed,
        "control_run_s": round(opened + span, 2),
        "cuts_mid_character": sum(r["mid_character"] for r in rows),
        "cuts_at_a_record_boundary": sum(r["at_record_boundary"] for r in rows),
        "resumed_ok": runs - len(failures),
        "failures": failures,
        "wall_s": round(time.monotonic() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=27)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="durability-") as tmp:
        result = measure(Path(tmp), runs=a.runs, seed=a.seed)
    text = json.dumps(result, indent=2, ensure_ascii=False)
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
