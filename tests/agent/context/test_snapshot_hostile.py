"""The snapshot honours the secret deny-list and every path component (issue 13, class 4).

A hostile repository in a tmp dir and a fake $HOME (the HOME variable points at it) holding
fake secrets. Each attack is one test: the control shows the secret is reachable through the
repository path (the attempt is real); the attempt asserts that the secret's text is in no
request the model receives (the scripted engine records every rendered prompt) and that the
file is reported as skipped, with the guard that stopped it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.agent.context import SnapshotConfig, build_snapshot
from m3agent.agent.context.files import FileRules
from m3agent.app.factory import build_session
from m3agent.app.settings import Settings
from m3agent.engine.backends.scripted import ScriptedEngine

TOKEN = "ghp_" + "Z1x9" * 9  # GitHub's shape: ghp_ + 36 characters
AWS_ID = "AKIA" + "Q7ZX3M5N8P2R4T6V"
KEY_BLOCK = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA{m}\n-----END OPENSSH PRIVATE KEY-----\n"


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), *args],
        check=True,
        capture_output=True,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(root),
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "GIT_CONFIG_NOSYSTEM": "1",
        },
    )


@pytest.fixture
def world(tmp_path, monkeypatch):
    """(repo, fake home) with HOME pointing at the fake home."""
    home = tmp_path / "home"
    for rel, text in {
        ".aws/credentials": f"[default]\naws_access_key_id = {AWS_ID}\nMARK-aws-credentials\n",
        ".ssh/id_rsa": KEY_BLOCK.format(m="MARK-ssh-key"),
        ".git-credentials": "https://u:MARK-git-credentials@example.com\n",
        ".config/gh/hosts.yml": "github.com:\n  oauth_token: MARK-gh-hosts\n",
        ".netrc": "machine example.com login u password MARK-netrc\n",
        "private/settings.ini": "password = MARK-through-symlinked-dir\n",
        "diary.txt": "MARK-hard-link\n",
    }.items():
        p = home / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    monkeypatch.setenv("HOME", str(home))
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src/app.py").write_text("def main():\n    return 'MARK-ordinary-source'\n")
    git(repo, "init", "-q")
    return repo, home


def _commit(repo: Path) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "x")


def symlinked_dir(repo: Path, home: Path) -> str:
    (repo / "conf").mkdir()
    (repo / "conf/settings.ini").write_text("password = placeholder\n")
    _commit(repo)  # tracked, then the directory is swapped for a link (as a command could)
    (repo / "conf/settings.ini").unlink()
    (repo / "conf").rmdir()
    (repo / "conf").symlink_to(home / "private")
    return "conf/settings.ini"


def hard_link(repo: Path, home: Path) -> str:
    os.link(home / "diary.txt", repo / "notes.txt")
    return "notes.txt"


def symlink_out(repo: Path, home: Path) -> str:
    (repo / "key.txt").symlink_to(home / ".ssh/id_rsa")
    return "key.txt"


def symlink_to_secret_inside(repo: Path, home: Path) -> str:
    (repo / ".env").write_text("DATABASE_URL=postgres://u:MARK-env-inside@db/x\n")
    (repo / "readme_env.txt").symlink_to(".env")
    return "readme_env.txt"


def _named(name: str, text: str):
    def attack(repo: Path, home: Path) -> str:
        p = repo / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        _commit(repo)
        return name

    attack.__name__ = "name " + name
    return attack


def _content(name: str, text: str):
    attack = _named(name, text)
    attack.__name__ = "content " + name
    return attack


ATTACKS = {
    "symlinked directory": (
        symlinked_dir,
        "MARK-through-symlinked-dir",
        "path goes through a symlink",
    ),
    "hard link": (hard_link, "MARK-hard-link", "hard link"),
    "symlink out": (symlink_out, "MARK-ssh-key", "symlink outside the repository"),
    "symlink to .env": (symlink_to_secret_inside, "MARK-env-inside", "symlink to a secret"),
    ".env": (_named(".env", "SECRET=MARK-dotenv\n"), "MARK-dotenv", "secret"),
    ".env.production": (
        _named(".env.production", "K=MARK-dotenv-prod\n"),
        "MARK-dotenv-prod",
        "secret",
    ),
    "id_rsa": (_named("deploy/id_rsa", "MARK-id-rsa\n"), "MARK-id-rsa", "secret"),
    "*.pem": (_named("certs/server.pem", "MARK-pem\n"), "MARK-pem", "secret"),
    "credentials": (_named("aws/credentials", "MARK-credentials\n"), "MARK-credentials", "secret"),
    ".netrc": (_named(".netrc", "password MARK-repo-netrc\n"), "MARK-repo-netrc", "secret"),
    ".git-credentials": (
        _named(".git-credentials", "MARK-repo-gitcred\n"),
        "MARK-repo-gitcred",
        "secret",
    ),
    "ghp_ token": (_content("src/settings.py", f"GITHUB = '{TOKEN}'\n"), TOKEN, "a GitHub token"),
    "AKIA key": (_content("src/cloud.py", f"KEY_ID = '{AWS_ID}'\n"), AWS_ID, "an AWS access key"),
    "private key block": (
        _content("docs/setup.md", "Use:\n" + KEY_BLOCK.format(m="MARK-pkey")),
        "MARK-pkey",
        "a private key",
    ),
}


def _requests(repo: Path, home: Path, settings_home: Path, **settings) -> list[str]:
    """Every prompt the model receives in a one-turn session started in `repo`."""
    engine = ScriptedEngine(["</mm:think>done"])
    s = Settings(
        home=settings_home,
        config_path=settings_home / "config.toml",
        engine="scripted",
        approval="never",
        **settings,
    )
    session = build_session(s, cwd=repo, engine=engine)

    async def go() -> None:
        done = await session.run_prompt("what is here?")
        assert done.reason == "done"
        await session.close()

    asyncio.run(go())
    assert engine.prompts
    return engine.prompts


@pytest.mark.parametrize("attack", ATTACKS)
def test_control_the_secret_is_reachable_through_the_repository(attack, world):
    repo, home = world
    make, marker, _ = ATTACKS[attack]
    rel = make(repo, home)
    assert marker in (repo / rel).read_text()  # opening the repository path gives the secret


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_secret_reaches_no_request(attack, world, tmp_path, tokenizer):
    repo, home = world
    make, marker, guard = ATTACKS[attack]
    rel = make(repo, home)
    prompts = _requests(repo, home, tmp_path / "m3home")
    assert all("MARK-ordinary-source" in p for p in prompts)  # the snapshot is there
    assert not any(marker in p for p in prompts)
    snap = build_snapshot(repo, tokenizer, SnapshotConfig(1_000_000))
    entry = {f.path: f for f in snap.files}[rel]
    assert entry.status == "skipped" and guard in entry.reason, entry


def test_user_rules_cannot_re_include_a_secret(world, tokenizer):
    repo, home = world
    (repo / ".env").write_text("K=MARK-reincluded\n")
    (repo / "server.pem").write_text("MARK-reincluded-pem\n")
    (repo / ".m3agentignore").write_text("!.env\n")
    snap = build_snapshot(
        repo,
        tokenizer,
        SnapshotConfig(
            1_000_000, FileRules(extra_skip=("!*.pem", "!.env"), use_builtin_rules=False)
        ),
    )
    assert "MARK-reincluded" not in snap.text
    assert {f.path: f.status for f in snap.files}[".env"] == "skipped"


def test_a_fifo_in_the_repository_does_not_hang_the_snapshot(world, tokenizer):
    repo, home = world
    (repo / "pipe.txt").write_text("x\n")
    _commit(repo)
    (repo / "pipe.txt").unlink()
    os.mkfifo(repo / "pipe.txt")  # a tracked path, now a FIFO: opening it would block
    snap = build_snapshot(repo, tokenizer, SnapshotConfig(1_000_000))
    assert {f.path: f.reason for f in snap.files}["pipe.txt"] == "not a regular file"


def test_a_hostile_index_path_is_not_followed(world, tokenizer):
    from m3agent.agent.context.scan import read_source

    repo, home = world
    assert read_source(repo, "../home/.netrc", FileRules()) == (None, "unsafe path")
    assert "MARK-netrc" in (repo / "../home/.netrc").read_text()  # control


def _cli(args: list[str], home: Path, tmp: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("m3agent")
    env = dict(os.environ, HOME=str(home), M3AGENT_HOME=str(tmp / "m3home"))
    env.pop("M3AGENT_CONFIG", None)
    script = tmp / "script.json"
    script.write_text('["</mm:think>done"]')
    return subprocess.run(
        [str(exe), "run", "hi", "--engine", "scripted", "--script", str(script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("where", ["home", "root", "parent of home"])
def test_starting_in_home_or_root_is_refused(where, world, tmp_path):
    repo, home = world
    cwd = {"home": home, "root": Path("/"), "parent of home": home.parent}[where]
    r = _cli(["--cwd", str(cwd)], home, tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to start in" in lines[0] and "--allow-home" in lines[0]
    assert not (tmp_path / "m3home/sessions").exists() or not any(
        (tmp_path / "m3home/sessions").iterdir()
    )


def test_a_project_below_home_is_not_refused(world, tmp_path):
    repo, home = world
    proj = home / "code/proj"
    proj.mkdir(parents=True)
    (proj / "x.py").write_text("x = 1\n")
    r = _cli(["--cwd", str(proj), "--output-format", "json"], home, tmp_path)
    assert r.returncode == 0, r.stderr


def test_insisting_on_home_still_sends_no_secret(world, tmp_path):
    """--allow-home: the session starts in the fake $HOME; its snapshot holds the ordinary
    files there and none of ~/.aws, ~/.ssh, ~/.git-credentials, ~/.config/gh, ~/.netrc."""
    repo, home = world
    (home / "todo.txt").write_text("MARK-home-todo\n")
    r = _cli(["--cwd", str(home), "--allow-home", "--output-format", "json"], home, tmp_path)
    assert r.returncode == 0, r.stderr
    prompts = _requests(home, home, tmp_path / "m3home2", allow_home=True)
    assert all("MARK-home-todo" in p for p in prompts)
    for marker in (
        "MARK-aws-credentials",
        AWS_ID,
        "MARK-ssh-key",
        "MARK-git-credentials",
        "MARK-gh-hosts",
        "MARK-netrc",
    ):
        assert not any(marker in p for p in prompts), marker
