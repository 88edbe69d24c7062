"""`m3agent generate` as a subprocess, on a tiny M3 written by `m3agent model init-tiny`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def m3agent(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "m3agent.app.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("m3") / "tiny"
    r = m3agent("model", "init-tiny", str(path), "--layers", "2", "--hidden", "128", "--seed", "1")
    assert r.returncode == 0, r.stderr
    return path


def write(tmp_path, lines: list) -> str:
    f = tmp_path / "req.jsonl"
    f.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return str(f)


def test_generate_sequential_and_concurrent_agree(tiny, tmp_path):
    shared = "Here is the repository snapshot. " * 30
    reqs = [
        {"id": "a", "prompt": shared + "First question?", "max_tokens": 6},
        {"id": "b", "prompt": shared + "Second question?", "max_tokens": 6},
        {
            "id": 3,
            "prompt_token_ids": [10, 11, 12, 13],
            "max_tokens": 4,
            "temperature": 0.9,
            "seed": 5,
        },
    ]
    f = write(tmp_path, reqs)
    seq = m3agent("generate", "--engine", "native", "--model", str(tiny), "--requests", f)
    assert seq.returncode == 0, seq.stderr
    rows = [json.loads(x) for x in seq.stdout.splitlines()]
    assert [r["id"] for r in rows] == ["a", "b", 3]
    a, b, c = rows
    assert a["cached_tokens"] == 0 and a["generated_tokens"] == 6 and len(a["token_ids"]) == 6
    # b shares the snapshot's full pages with a (sequential: a finished first).
    assert b["cached_tokens"] > 0 and b["cached_tokens"] % 128 == 0
    assert b["cached_tokens"] <= b["prompt_tokens"] - 1
    assert c["prompt_tokens"] == 4 and c["generated_tokens"] == 4
    assert all(r["ttft_s"] is not None and r["total_s"] >= r["ttft_s"] for r in rows)

    con = m3agent(
        "generate",
        "--model",
        str(tiny),
        "--requests",
        f,
        "--concurrent",
        "--max-num-batched-tokens",
        "128",
    )
    assert con.returncode == 0, con.stderr
    by_id = {r["id"]: r for r in map(json.loads, con.stdout.splitlines())}
    assert {k: v["token_ids"] for k, v in by_id.items()} == {r["id"]: r["token_ids"] for r in rows}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "line 2: not JSON"),
        ('{"id": "x"}', "line 2: give exactly one of prompt and prompt_token_ids"),
        ('{"id": "x", "prompt": "p", "max_tokens": 0}', "line 2: max_tokens: "),
        ('{"id": "x", "prompt": "p", "temprature": 1}', "line 2: temprature: Extra inputs"),
        ('{"id": "ok", "prompt": "dup"}', "line 2: duplicate id 'ok'"),
    ],
)
def test_bad_lines_are_named_and_exit_2(tiny, tmp_path, line, message):
    f = write(tmp_path, ['{"id": "ok", "prompt": "fine"}', line])
    r = m3agent("generate", "--model", str(tiny), "--requests", f)
    assert r.returncode == 2
    assert message in r.stderr and r.stderr.count("\n") == 1 and r.stdout == ""


def test_a_rejected_request_gets_an_error_line_and_the_others_run(tiny, tmp_path):
    f = write(
        tmp_path,
        [
            {"id": "long", "prompt_token_ids": [7] * 300, "max_tokens": 2},
            {"id": "fine", "prompt_token_ids": [7] * 20, "max_tokens": 2},
        ],
    )
    r = m3agent(
        "generate", "--model", str(tiny), "--requests", f, "--max-model-len", "256", "--concurrent"
    )
    assert r.returncode == 1
    rows = [json.loads(x) for x in r.stdout.splitlines()]
    assert rows[0] == {
        "id": "long",
        "error": "prompt is 300 tokens, more than the model's maximum of 255",
    }
    assert rows[1]["id"] == "fine" and rows[1]["generated_tokens"] == 2


def test_missing_model_is_exit_3(tmp_path):
    f = write(tmp_path, [{"id": 1, "prompt": "x"}])
    r = m3agent("generate", "--model", str(tmp_path / "none"), "--requests", f)
    assert r.returncode == 3 and "cannot load the native model" in r.stderr


def test_generate_with_fp8_kv_cache(tiny, tmp_path):
    f = write(tmp_path, [{"id": "a", "prompt_token_ids": list(range(10, 300)), "max_tokens": 4}])
    r = m3agent("generate", "--model", str(tiny), "--requests", f, "--kv-cache-dtype", "fp8")
    assert r.returncode == 0, r.stderr
    row = json.loads(r.stdout.splitlines()[0])
    assert row["generated_tokens"] == 4
    bad = m3agent("generate", "--model", str(tiny), "--requests", f, "--kv-cache-dtype", "int4")
    assert bad.returncode == 2 and "--kv-cache-dtype" in bad.stderr


def test_generate_with_the_host_kv_tier(tiny, tmp_path):
    # 700 tokens: 6 blocks; one query selects all visible ones (top-k 16) for each of the 2 KV
    # heads; a device cache of 6 blocks per MSA layer holds them
    prompt = [(7 * i) % 250 + 3 for i in range(700)]
    f = write(tmp_path, [{"id": "a", "prompt_token_ids": prompt, "max_tokens": 3}])
    args = ("generate", "--model", str(tiny), "--requests", f)
    want = m3agent(*args)
    got = m3agent(*args, "--kv-host-tier", "--kv-device-blocks", "6")
    assert want.returncode == 0 and got.returncode == 0, got.stderr
    token_ids = [json.loads(r.stdout.splitlines()[0])["token_ids"] for r in (want, got)]
    assert token_ids[0] == token_ids[1] and len(token_ids[0]) == 3
    bad = m3agent(*args, "--kv-host-tier", "--kv-device-blocks", "0")
    assert bad.returncode == 2 and "--kv-device-blocks must be >= 1" in bad.stderr
