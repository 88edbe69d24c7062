"""The KV host-memory tier through the product (issue 38): `m3agent serve --kv-host-tier on`
of a tiny random M3 on the CPU over real HTTP on loopback says in the usage which cached
tokens the tier kept in host memory and writes its pages to the disk tier, and
`--kv-host-tier off` computes the same greedy tokens."""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest
from m3agent.app.serve.guard import read_token

from ..support.cli import CONSOLE_SCRIPT, init_tiny_model, run_cli, start_cli, wait_ready

pytestmark = pytest.mark.slow
PROMPT = [(7 * i) % 200 + 3 for i in range(300)]  # two full pages and a tail


def complete(home: Path, lock: dict) -> dict:
    body = {"model": lock["served_model_name"], "prompt": PROMPT, "max_tokens": 6}
    body |= {"temperature": 0}
    r = httpx.post(
        f"http://127.0.0.1:{lock['port']}/v1/completions",
        json=body,
        headers={"Authorization": f"Bearer {read_token(home)}"},
        timeout=120,
    )
    assert r.status_code == 200, r.text
    got = r.json()
    return {"text": got["choices"][0]["text"], **got["usage"]["prompt_tokens_details"]}


def serving(home: Path, tiny: Path, tier: str, requests: int) -> tuple[list[dict], str]:
    """The answers of `requests` identical requests to a fresh server, and its log."""
    proc = start_cli(
        home, "serve", "--engine", "native", "--model", str(tiny), "--kv-host-tier", tier,
        command=CONSOLE_SCRIPT, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        lock = wait_ready(home, proc)
        answers = [complete(home, lock) for _ in range(requests)]
    finally:
        stop = run_cli(home, "serve", "--stop", timeout=60, command=CONSOLE_SCRIPT)
        assert stop.returncode == 0, stop.stderr
    assert proc.stderr is not None
    return answers, proc.stderr.read()


def test_serve_with_the_host_tier_on_and_off(tmp_path):
    tiny = init_tiny_model(tmp_path / "tiny", command=CONSOLE_SCRIPT)
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text('device = "cpu"\n')

    (cold, hit), log = serving(home, tiny, "on", 2)
    assert "native: KV host tier on (forced)" in log
    assert cold == {"text": cold["text"], "cached_tokens": 0} and cold["text"]
    # the second time the prefix is a cache hit, its K/V pages in the host pool
    assert hit == {"text": cold["text"], "cached_tokens": 256, "host_tokens": 256}

    assert any(home.joinpath("kv-cache").rglob("*.kvp"))  # pages written from the host pool
    # without the tier, and without the disk tier's pages, computed anew: the same tokens
    # (pages crossing between the two: tests/engine/native/test_host_kv_tier.py)
    (home / "config.toml").write_text('device = "cpu"\nkv_disk_cache_gb = 0\n')
    (plain,), log = serving(home, tiny, "off", 1)
    assert "native: KV host tier off (forced)" in log
    assert plain == {"text": cold["text"], "cached_tokens": 0}

    bad = run_cli(home, "serve", "--model", str(tiny), "--kv-host-tier", "maybe")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: kv_host_tier must be auto, on or off, got 'maybe'"
