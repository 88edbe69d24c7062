"""--model resolution: local directories, the hub cache (offline), and broken checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from m3agent.engine.api import EngineUnavailable
from m3agent.engine.model_source import looks_like_repo_id, resolve_model


def checkpoint(path: Path, shards: int = 2, present: int | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"architectures": ["X"]}))
    names = [f"model-{i:05d}.safetensors" for i in range(shards)]
    (path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {f"w{i}": n for i, n in enumerate(names)}})
    )
    for n in names[: shards if present is None else present]:
        (path / n).write_bytes(b"\0" * 16)
    return path


def test_local_directory(tmp_path):
    p = checkpoint(tmp_path / "ok")
    r = resolve_model(str(p))
    assert r.path == p.resolve() and r.repo_id is None and r.key == str(p.resolve())


def test_missing_directory_named(tmp_path):
    with pytest.raises(EngineUnavailable, match=r"nope does not exist"):
        resolve_model(str(tmp_path / "nope"))


def test_incomplete_checkpoint_names_missing_shards(tmp_path):
    p = checkpoint(tmp_path / "half", shards=5, present=1)
    with pytest.raises(EngineUnavailable) as e:
        resolve_model(str(p))
    assert "half is incomplete: 4 of 5 weight shards missing" in str(e.value)
    assert "model-00001.safetensors" in str(e.value) and "and 1 more" in str(e.value)


def test_not_a_checkpoint(tmp_path):
    (tmp_path / "src").mkdir()
    with pytest.raises(EngineUnavailable, match=r"src has no config.json"):
        resolve_model(str(tmp_path / "src"))
    bad = checkpoint(tmp_path / "badjson")
    (bad / "config.json").write_text("{oops")
    with pytest.raises(EngineUnavailable, match="config.json is not valid JSON"):
        resolve_model(str(bad))


def test_repo_id_shape():
    assert looks_like_repo_id("MiniMaxAI/MiniMax-M3")
    assert not looks_like_repo_id("./models/x") and not looks_like_repo_id("a/b/c")


def _hub(tmp_path: Path, code: str, offline: bool) -> subprocess.CompletedProcess:
    """Runs in a fresh interpreter: huggingface_hub reads its environment at import."""
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HOME": str(tmp_path / "hf")}
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_hub_repo_from_the_cache_offline(tmp_path):
    # The cache layout huggingface_hub writes: refs/main -> snapshots/<commit>/files.
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--m3-tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    checkpoint(repo / "snapshots" / commit)
    r = _hub(
        tmp_path,
        """
        from m3agent.engine.model_source import resolve_model
        m = resolve_model("acme/m3-tiny")
        print(m.repo_id, m.path)
    """,
        offline=True,
    )
    assert r.returncode == 0, r.stderr
    repo_id, path = r.stdout.split()
    assert repo_id == "acme/m3-tiny" and path.endswith(f"snapshots/{commit}")


def test_uncached_hub_repo_offline_is_one_clear_line(tmp_path):
    r = _hub(
        tmp_path,
        """
        from m3agent.engine.api import EngineUnavailable
        from m3agent.engine.model_source import resolve_model
        try:
            resolve_model("acme/not-here")
        except EngineUnavailable as e:
            print(e)
    """,
        offline=True,
    )
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert "\n" not in line
    assert "acme/not-here is not in the hub cache and HF_HUB_OFFLINE is set" in line


def test_local_only_never_downloads(tmp_path):
    r = _hub(
        tmp_path,
        """
        from m3agent.engine.api import EngineUnavailable
        from m3agent.engine.model_source import resolve_model
        try:
            resolve_model("acme/not-here", local_only=True)
        except EngineUnavailable as e:
            print(e)
    """,
        offline=False,
    )
    assert r.stdout.strip() == "acme/not-here is not in the local hub cache"


# ---- a directory in the working tree named like the model (issue 21, item 4) ---------------

EVIL_TEMPLATE = "{{ 'PWNED: the repository chose this template' }}"


def _hostile_repo(root: Path) -> Path:
    """A repository that commits `MiniMaxAI/MiniMax-M3/` with its own template and tokenizer
    (and enough of a checkpoint to pass the checks)."""
    from m3agent.engine.m3.tokenizer import default_tokenizer_path

    d = checkpoint(root / "MiniMaxAI" / "MiniMax-M3")
    (d / "chat_template.jinja").write_text(EVIL_TEMPLATE)
    (d / "tokenizer.json").write_bytes(default_tokenizer_path().read_bytes())
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "HOME": str(root)}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "model files"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, env=env, capture_output=True)
    return d


def test_a_repo_directory_named_like_the_model_is_not_the_model(tmp_path, monkeypatch):
    from m3agent.app.warm import local_chat_files

    repo = tmp_path / "repo"
    evil = _hostile_repo(repo)
    monkeypatch.chdir(repo)  # the agent runs from the repository root
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    with pytest.raises(EngineUnavailable) as e:
        resolve_model("MiniMaxAI/MiniMax-M3", local_only=True, check=False)
    assert "hub cache" in str(e.value)
    # The remote backend's chat files (template, tokenizer) come from nowhere in the repo.
    files = local_chat_files("MiniMaxAI/MiniMax-M3")
    assert "template" not in files, files["template"].origin
    # Control: written as a path, the same directory is the model, template and all.
    for spec in ("./MiniMaxAI/MiniMax-M3", str(evil)):
        assert resolve_model(spec).path == evil.resolve()
    files = local_chat_files("./MiniMaxAI/MiniMax-M3")
    assert files["template"].origin == str(evil.resolve() / "chat_template.jinja")


def test_a_bare_relative_name_is_not_a_path_unless_written_as_one(tmp_path, monkeypatch):
    checkpoint(tmp_path / "tiny")
    checkpoint(tmp_path / "models" / "m3" / "x")
    monkeypatch.chdir(tmp_path)
    for spec in ("tiny", "models/m3/x"):
        with pytest.raises(EngineUnavailable, match=r"write \./"):
            resolve_model(spec)
    assert resolve_model("./tiny").path == (tmp_path / "tiny").resolve()
    assert resolve_model("../" + tmp_path.name + "/tiny").path == (tmp_path / "tiny").resolve()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_model("~/tiny").path == (tmp_path / "tiny").resolve()


def test_the_users_model_dirs_are_searched_by_name(tmp_path, monkeypatch):
    mine = checkpoint(tmp_path / "home" / "models" / "MiniMaxAI" / "MiniMax-M3")
    repo = tmp_path / "repo"
    _hostile_repo(repo)
    monkeypatch.chdir(repo)
    dirs = (tmp_path / "home" / "models",)
    r = resolve_model("MiniMaxAI/MiniMax-M3", model_dirs=dirs)
    assert r.path == mine.resolve() and r.repo_id == "MiniMaxAI/MiniMax-M3"
    checkpoint(tmp_path / "home" / "models" / "tiny")
    assert resolve_model("tiny", model_dirs=dirs).path == (dirs[0] / "tiny").resolve()
    # A name cannot climb out of the model dir.
    with pytest.raises(EngineUnavailable):
        resolve_model("MiniMax-M3/../../MiniMaxAI/MiniMax-M3", model_dirs=(repo / "x",))
