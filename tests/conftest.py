"""Fixtures every test area shares: an isolated m3agent home and real repositories in temp
dirs (git or not)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def write_files(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content, encoding="utf-8")
    return root


def git_init(root: Path, commit: bool = True) -> None:
    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-C", str(root), *args],
            check=True,
            capture_output=True,
            env={
                "GIT_AUTHOR_NAME": "t",
                "GIT_AUTHOR_EMAIL": "t@t",
                "GIT_COMMITTER_NAME": "t",
                "GIT_COMMITTER_EMAIL": "t@t",
                "HOME": str(root),
                "PATH": "/usr/bin:/bin",
            },
        )

    git("init", "-q")
    if commit:
        git("add", "-A")
        git("commit", "-q", "-m", "init")


@pytest.fixture
def make_repo(tmp_path):
    """make_repo(files, git=True, name="repo") -> the repository's root."""

    def make(files: dict[str, str | bytes], git: bool = True, name: str = "repo") -> Path:
        root = write_files(tmp_path / name, files)
        if git:
            git_init(root)
        return root

    return make


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """An empty m3agent data home; no config file from the developer's environment."""
    h = tmp_path / "home"
    monkeypatch.setenv("M3AGENT_HOME", str(h))
    monkeypatch.delenv("M3AGENT_CONFIG", raising=False)
    return h
