"""The KV disk tier through the real commands: `m3agent run` (a background `m3agent serve` of a
tiny random M3 on CPU), `m3agent serve --stop`, `m3agent run -c` in a fresh server: the session's
prefix comes back from disk, and says so; `m3agent cache` shows it and `cache clear` empties it.
Greedy tokens with and without the tier are compared at the engine level
(tests/engine/native/test_kv_disk*.py); here the figures a user sees."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ..support.cli import CONSOLE_SCRIPT, init_tiny_model, run_cli

pytestmark = pytest.mark.slow


def m3agent(home: Path, *args: str) -> subprocess.CompletedProcess:
    return run_cli(home, *args, timeout=300, command=CONSOLE_SCRIPT)


def test_a_session_continued_after_serve_stop_reads_its_prefix_from_disk(tmp_path, make_repo):
    tiny = init_tiny_model(tmp_path / "tiny", command=CONSOLE_SCRIPT)
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('max_tokens = 4\ndevice = "cpu"\ncontext = false\n')
    cwd = make_repo({"README.md": "# demo\n"})
    base = ("run", "--engine", "native", "--model", str(tiny), "--cwd", str(cwd))
    base += ("--max-turns", "1", "--output-format", "json")
    try:
        first = m3agent(home, *base, "hi " * 200)
        assert first.returncode in (0, 4), first.stderr
        assert json.loads(first.stdout)["usage"]["cached_prompt_tokens"] == 0
        assert m3agent(home, "serve", "--stop").returncode == 0
        shown = json.loads(m3agent(home, "cache", "--json").stdout)
        assert shown["dir"] == str(home / "kv-cache") and shown["pages"] > 0
        (model,) = shown["models"]
        assert model["name"] == "tiny" and model["device"] == "cpu"

        second = m3agent(home, *base[:-2], "-c", "and again")  # text: the summary line
        assert second.returncode in (0, 4), second.stderr
        restored = shown["pages"] * 128
        assert f"({restored} cached, {restored} from disk)" in second.stderr
    finally:
        m3agent(home, "serve", "--stop")
    cleared = m3agent(home, "cache", "clear")
    assert cleared.returncode == 0 and f"deleted {shown['pages']} pages" in cleared.stdout
    assert "empty" in m3agent(home, "cache").stdout
    bad = m3agent(home, "cache", "clear", "no-such-model")
    assert bad.returncode == 2 and bad.stderr.startswith("error: the KV cache in")
