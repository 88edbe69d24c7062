"""The bundled tokenizer and checkpoint loading (streaming detokenisation: tests/engine/native)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from m3agent.engine.m3 import tokens as T
from m3agent.engine.m3.build_tokenizer import build_tokenizer_json
from m3agent.engine.m3.tokenizer import (
    M3Tokenizer,
    default_tokenizer_path,
    write_tokenizer_files,
)


@pytest.fixture(scope="module")
def tok():
    return M3Tokenizer.default()


def test_bundled_file_is_small_and_reproducible(tmp_path):
    bundled = default_tokenizer_path()
    assert bundled.stat().st_size < 2_000_000
    out = tmp_path / "t.json"
    subprocess.run(
        [sys.executable, "-m", "m3agent.engine.m3.build_tokenizer", str(out)],
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == bundled.read_bytes()


def test_added_tokens_single_ids_and_flags(tok):
    for s in T.ALL_ADDED_TOKENS:
        ids = tok.encode(s)
        assert ids == [tok.token_to_id(s)], s
    assert tok.special_token_ids == {tok.token_to_id(s) for s in T.SPECIAL_TOKENS}
    assert tok.eos_token_id == tok.token_to_id("[e~[")
    assert tok.ns_token_id == tok.token_to_id(T.NS)
    assert tok.think_start_token_id not in tok.special_token_ids
    assert not tok.think_markers_special
    assert 7000 < tok.vocab_size <= 8192


def test_skip_special_tokens_keeps_non_special_markers(tok):
    text = f"]~!b[]~b]ai\n<mm:think>r</mm:think>ok{T.NS}<tool_call>{T.IMAGE}[e~["
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert (
        tok.decode(ids, skip_special_tokens=True)
        == f"ai\n<mm:think>r</mm:think>ok{T.NS}<tool_call>"
    )


def test_encode_has_no_bos_and_compresses(tok):
    text = "def main(args):\n    return self.value  # the user said hello\n"
    ids = tok.encode(text)
    assert ids[0] != tok.bos_token_id
    assert len(ids) < len(text) / 2
    assert tok.decode(ids) == text


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.sampled_from(["", T.THINK_START, T.EOS, T.NS]))
def test_roundtrip(text, marker):
    tok = M3Tokenizer.default()
    s = text + marker + text
    assert tok.decode(tok.encode(s)) == s


def test_model_dir_roundtrip(tmp_path):
    target = write_tokenizer_files(tmp_path / "ckpt")
    assert target.name == "tokenizer.json"
    cfg = json.loads((tmp_path / "ckpt" / "tokenizer_config.json").read_text())
    assert cfg["eos_token"] == "[e~[" and cfg["bos_token"] == "]~!b["
    flags = {v["content"]: v["special"] for v in cfg["added_tokens_decoder"].values()}
    assert flags[T.NS] is False and flags[T.THINK_END] is False and flags[T.EOS] is True
    t = M3Tokenizer.from_model_dir(tmp_path / "ckpt")
    assert t.eos_token_id == M3Tokenizer.default().eos_token_id


def test_build_tokenizer_json_into_directory(tmp_path):
    out = build_tokenizer_json(tmp_path)
    assert out == tmp_path / "tokenizer.json"
    assert out.read_bytes() == default_tokenizer_path().read_bytes()
    assert (tmp_path / "tokenizer_config.json").is_file()


def test_custom_eos_from_config(tmp_path):
    write_tokenizer_files(tmp_path)
    cfg_path = tmp_path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["eos_token"] = {"content": "]~b]", "special": True}
    cfg_path.write_text(json.dumps(cfg))
    t = M3Tokenizer.from_model_dir(tmp_path)
    assert t.eos_token_id == t.token_to_id("]~b]")


@pytest.mark.parametrize(
    ("setup", "match"),
    [
        (lambda d: None, "no tokenizer.json"),
        (lambda d: (d / "tokenizer.json").write_text("{nope"), "cannot load tokenizer"),
        (
            lambda d: (write_tokenizer_files(d), (d / "tokenizer_config.json").write_text("[")),
            "not valid JSON",
        ),
        (
            lambda d: (
                write_tokenizer_files(d),
                (d / "tokenizer_config.json").write_text('{"eos_token": "<eos>"}'),
            ),
            "no end-of-turn token",
        ),
    ],
)
def test_load_errors_are_value_errors(tmp_path, setup, match):
    d = Path(tmp_path)
    setup(d)
    with pytest.raises(ValueError, match=match):
        M3Tokenizer.from_model_dir(d)
