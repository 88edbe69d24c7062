"""Power cuts at every byte offset of the last record of a real session log (issue 27, item 3).

The log comes from a real `m3agent run` whose answer is full of multi-byte UTF-8 characters, so
that many cuts land mid-character. Every cut must resume (the torn tail cut off at the last
complete record, backed up and reported) in every reader: `Conversation.load` with and without
repair, the listing `m3agent sessions` uses, and `--continue`'s choice of the last session.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from m3agent.agent.conversation import Conversation, SessionLogError
from m3agent.agent.session_index import latest_session_id, list_sessions

from ..support.cli import run_cli

# Two-, three- and four-byte characters, in the prompt and in the answer.
ANSWER = "résumé — 日本語のテキスト 🎉🚀 ok"
PROMPT = "explique ça: naïve café ✓"


def cli(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Output as bytes: the test reads the multi-byte characters undecoded."""
    return run_cli(home, *args, cwd=cwd, timeout=120, text=False)


def scripted(tmp: Path, answers: list[str]) -> Path:
    script = tmp / f"script{len(list(tmp.glob('script*')))}.json"
    script.write_text(json.dumps(answers, ensure_ascii=False), encoding="utf-8")
    return script


RUN = ("--engine", "scripted", "--approval", "never", "--no-context")


@pytest.fixture(scope="module")
def real_log(tmp_path_factory) -> tuple[Path, bytes]:
    """(workspace, the bytes of a real log whose last record holds multi-byte text)."""
    tmp = tmp_path_factory.mktemp("real")
    home, ws = tmp / "home", tmp / "ws"
    ws.mkdir()
    r = cli(
        home,
        "run",
        PROMPT,
        *RUN,
        "--script",
        str(scripted(tmp, [f"</mm:think>{ANSWER}"])),
        "--cwd",
        str(ws),
        cwd=ws,
    )
    assert r.returncode == 0, r.stderr.decode()
    (log,) = (home / "sessions").glob("*.jsonl")
    return ws, log.read_bytes()


def last_record_span(data: bytes) -> tuple[int, int]:
    end = len(data) - 1  # the final newline
    return data.rfind(b"\n", 0, end) + 1, end


def test_the_log_holds_multibyte_text_in_its_last_record(real_log):
    _, data = real_log
    start, end = last_record_span(data)
    last = data[start:end]
    assert any(b >= 0x80 for b in last), last  # so cuts do land mid-character
    cuts_mid_char = [
        k for k in range(start, end) if 0x80 <= data[k] < 0xC0
    ]  # a continuation byte right after the cut
    assert len(cuts_mid_char) > 10


def _place(tmp: Path, data: bytes, sid: str, cut: int) -> Path:
    sessions = tmp / f"cut{cut}" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / f"{sid}.jsonl").write_bytes(data[:cut])
    return sessions


def _last_message_log(data: bytes) -> bytes:
    """The log as it stood right after its last message record (the assistant's answer)."""
    lines = data.splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if b'"kind": "message"' in line)
    return b"".join(lines[: last + 1])


@pytest.mark.parametrize("which", ["last record", "last message"])
def test_every_cut_of_the_last_record_is_read_by_every_reader(real_log, tmp_path, which):
    ws, data = real_log
    if which == "last message":
        data = _last_message_log(data)
    sid = json.loads(data.split(b"\n", 1)[0])["id"]
    start, end = last_record_span(data)
    whole = Conversation.load(_place(tmp_path / "w", data, sid, len(data)), sid).messages
    before = Conversation.load(_place(tmp_path / "b", data, sid, start), sid).messages
    assert any(b >= 0x80 for b in data[start:end])
    failures = []
    for cut in range(start + 1, end + 1):  # every byte of the last record, newline excluded
        sessions = _place(tmp_path, data, sid, cut)
        log = sessions / f"{sid}.jsonl"
        try:
            peek = Conversation.load(sessions, sid, repair=False)  # the look before resuming
            listed = list_sessions(sessions)
            latest = latest_session_id(sessions, ws)
            conv = Conversation.load(sessions, sid)
        except (SessionLogError, UnicodeDecodeError, ValueError) as e:
            failures.append((cut, repr(e)))
            continue
        complete = cut == end  # the record is all there but for its newline
        expected = whole if complete else before
        ok = (
            peek.messages == expected
            and conv.messages == expected
            and [s.id for s in listed] == [sid]
            and latest == sid
            and log.read_bytes().endswith(b"\n")
        )
        if not complete:
            backup = log.with_name(log.name + ".torn-1")
            ok = ok and backup.read_bytes() == data[start:cut] and len(conv.repairs) == 1
            ok = ok and (backup.stat().st_mode & 0o777) == 0o600
        if not ok:
            failures.append((cut, "wrong history or no backup"))
            continue
        conv.append(whole[-1])  # and the resumed log takes the next record cleanly
        conv.close()
        if Conversation.load(sessions, sid).messages != (*expected, whole[-1]):
            failures.append((cut, "append after repair"))
    assert failures == [], f"{len(failures)} of {end - start} cuts failed: {failures[:5]}"


def test_a_torn_log_beside_healthy_ones_lists_and_continues_from_the_cli(real_log, tmp_path):
    """`m3agent sessions` and `run --continue` as real commands, the cut mid-character."""
    ws, data = real_log
    sid = json.loads(data.split(b"\n", 1)[0])["id"]
    home = tmp_path / "home"
    sessions = home / "sessions"
    sessions.mkdir(parents=True)
    start, end = last_record_span(data)
    cut = next(k for k in range(start, end) if 0x80 <= data[k] < 0xC0)  # mid-character
    (sessions / f"{sid}.jsonl").write_bytes(data[:cut])
    healthy = cli(
        home,
        "run",
        "another",
        *RUN,
        "--script",
        str(scripted(tmp_path, ["</mm:think>fine"])),
        "--cwd",
        str(tmp_path),
        cwd=tmp_path,
    )
    assert healthy.returncode == 0, healthy.stderr.decode()
    listed = cli(home, "sessions", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr.decode()
    assert sid.encode() in listed.stdout and listed.stdout.count(b"\n") == 2
    cont = cli(
        home,
        "run",
        "go on",
        *RUN,
        "--continue",
        "--script",
        str(scripted(tmp_path, ["</mm:think>continued"])),
        "--cwd",
        str(ws),
        "--output-format",
        "json",
        cwd=ws,
    )
    assert cont.returncode == 0, cont.stderr.decode()
    assert b"continued" in cont.stdout
    assert (sessions / f"{sid}.jsonl.torn-1").read_bytes() == data[start:cut]
    again = Conversation.load(sessions, sid)
    assert [m.content for m in again.messages][-2:] == ["go on", "continued"]
