"""Issue 37 item 9: a denied call says who denied it and what to do, whole: plan mode names
plan mode (not "the config"), and the headless denial is not cut mid-sentence in the text
output. The installed console script on the scripted engine, real M3 markup."""

from __future__ import annotations

import json
import subprocess

import pytest

from ..support.cli import CONSOLE_SCRIPT, cli_env
from ..support.markup import answer, calls, invoke

WRITE = calls(invoke("write_file", path="new.txt", content="hi"), reasoning="write it")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (
            ["--permission-mode", "plan"],
            "not run: plan mode (read only until the plan is approved) denies the tool write_file",
        ),
        (
            ["--approval", "untrusted"],
            "not run: the user denied this call: nobody can approve in headless mode (no "
            "terminal); the user may rerun with --approval never or allow the tool in config",
        ),
    ],
)
def test_denials_say_why_whole(tmp_path, flags, said):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([WRITE, answer("Done.")]))
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run(
        [*CONSOLE_SCRIPT, "run", "--engine", "scripted", "--script", str(script),
         "--accept-sandbox-gaps", *flags, "go"],
        env=cli_env(tmp_path / "home"), cwd=work, capture_output=True, text=True, timeout=120,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert r.returncode == 0 and r.stdout == "Done.\n", r.stderr
    assert f"  [error] {said}\n" in r.stderr
    assert not (work / "new.txt").exists()
