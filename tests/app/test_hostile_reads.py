"""Issue 36, class 1: what the agent itself reads on the host from paths a repository controls.

A hostile repository (and a model following it) plants symlinks and imports towards secrets in
the user's home (a fake HOME here, never the real one): a SKILL.md swapped for a link to
`~/.ssh/id_rsa` after the session listed it, a command file linked to rclone's config,
AGENTS.md imports of `~/.vault-token`, of a link to `~/.pgpass` and of `../..` into the home,
an AGENTS.md another user left in a parent directory, and the model asking read_file and grep
for `~/.pgpass`, `~/.bash_history` and `/proc/self/environ`. A real session (scripted model,
real tools) runs it; nothing of a secret may reach a prompt or a tool result. The control turns
the read policy off (tools/host_read.refusal allowing everything) and sees the same attack
deliver the secrets; the owner check has its own control.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from m3agent.agent import events as ev
from m3agent.agent import ops
from m3agent.app.settings import load_settings
from m3agent.tools import host_read, paths
from m3agent.tools.host_read import HostReader, ReadRefused
from m3agent.tools.sandbox.policy import SandboxPolicy

from ..support.markup import answer, calls, invoke

SECRETS = {
    ".ssh/id_rsa": "SSHKEY-11",
    ".pgpass": "PGPASS-22",
    ".bash_history": "HISTORY-33",
    ".vault-token": "VAULT-44",
    ".config/rclone/rclone.conf": "RCLONE-55",
    ".SSH/id.pem": "CASEKEY-66",  # ~/.ssh spelled otherwise (a case-insensitive file system)
    "notes/diary.md": "DIARY-99",  # on no secret list: the sandbox's view of home keeps it
}
SKILL = "---\nname: helper\ndescription: helps\n---\nHELPER-BODY\n"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def attack(tmp_path, home, monkeypatch):
    """(fake home, repository) with the secrets and the hostile files in place."""
    user = tmp_path / "user"
    for rel, text in SECRETS.items():
        _write(user / rel, text)
    monkeypatch.setenv("HOME", str(user))
    _write(tmp_path / "AGENTS.md", "PARENT-RULES\n")  # the user's own, above the repository
    foreign = _write(tmp_path / "proj" / "AGENTS.md", "FOREIGN-RULES @notes.md\n")
    _write(tmp_path / "proj" / "notes.md", "FOREIGN-IMPORT\n")
    os.chown(foreign, 65534, 65534)  # left there by another user of the machine
    repo = tmp_path / "proj" / "repo"
    _write(
        repo / "AGENTS.md",
        "Rules. @~/.vault-token @leak.md @../../user/.bash_history @~/.SSH/id.pem @env.md\n"
        "@~/notes/diary.md\n",
    )
    (repo / "leak.md").symlink_to(user / ".pgpass")
    (repo / "env.md").symlink_to("/proc/self/environ")
    (repo / ".m3agent" / "commands").mkdir(parents=True)
    (repo / ".m3agent" / "commands" / "sync.md").symlink_to(user / ".config/rclone/rclone.conf")
    _write(repo / ".claude" / "skills" / "helper" / "SKILL.md", SKILL)
    return user, repo


def _session_run(repo: Path, user: Path, *, context: bool) -> tuple[str, list[str]]:
    """One turn: the model loads the skill (swapped for a link to the key after the session
    listed it), reads ~/.pgpass, ~/.bash_history and /proc/self/environ and greps the home.
    (every prompt the engine got, joined; the tool outputs)."""
    from m3agent.app.factory import build_session
    from m3agent.engine.backends.scripted import ScriptedEngine

    script = [
        calls(
            invoke("skill", skill="helper"),
            invoke("read_file", path="~/.pgpass"),
            invoke("read_file", path=str(user / ".bash_history")),
            invoke("read_file", path="/proc/self/environ"),
            invoke("grep", pattern="VAULT|RCLONE", path=str(user)),
        ),
        answer("done"),
    ]
    settings = load_settings().override(approval="never", context=context)
    engine = ScriptedEngine(script)
    session = build_session(settings, cwd=repo, engine=engine)
    skill_md = repo / ".claude" / "skills" / "helper" / "SKILL.md"
    skill_md.unlink()  # what the model does with a shell command once the session is open
    skill_md.symlink_to(user / ".ssh" / "id_rsa")

    async def go() -> list[str]:
        outs: list[str] = []
        try:
            session.submit(ops.UserTurn("go"))
            async for e in session.events():
                if isinstance(e, ev.ToolCallFinished):
                    outs.append(e.output)
                elif isinstance(e, ev.TurnComplete):
                    break
        finally:
            await session.close()
        return outs

    outs = asyncio.run(go())
    return "\n".join(engine.prompts), outs


def _environ_marker() -> str:
    """An entry of this process's /proc/self/environ (its environment as it started)."""
    entries = Path("/proc/self/environ").read_bytes().split(b"\0")
    return next(e for e in entries if e.startswith(b"PATH=")).decode()


def _leaked(text: str) -> list[str]:
    found = [s for s in SECRETS.values() if s in text]
    return found + (["ENVIRON"] if _environ_marker() in text else [])


def test_hostile_repository_reads_nothing_secret(attack):
    user, repo = attack
    prompts, outs = _session_run(repo, user, context=True)
    assert len(outs) == 5, outs
    assert _leaked(prompts) == [] and _leaked("\n".join(outs)) == []
    assert "PARENT-RULES" in prompts  # the user's own parent file still counts
    assert "FOREIGN-RULES" not in prompts and "FOREIGN-IMPORT" not in prompts
    assert "/sync" not in prompts
    skill, pgpass, history, environ, grep = outs
    assert "not read (a secret location" in skill
    assert "secret location" in pgpass and "secret location" in history
    assert "system location" in environ
    assert "no matches" in grep.lower() or grep.strip() == "", grep


def test_no_context_reads_no_instruction_file_at_all(attack):
    user, repo = attack
    prompts, _ = _session_run(repo, user, context=False)
    assert "PARENT-RULES" not in prompts and "<instructions" not in prompts
    assert _leaked(prompts) == []


def _policy_off(monkeypatch) -> None:
    """The control: the host read policy allows everything (the checks of where a file is;
    how it is opened stays)."""
    monkeypatch.setattr(host_read, "refusal", lambda *a, **k: None)
    monkeypatch.setattr(paths, "refusal", lambda *a, **k: None)
    monkeypatch.setattr(HostReader, "_hidden_home", lambda self, real: False)


def test_control_without_the_policy_the_same_attack_delivers_the_secrets(attack, monkeypatch):
    user, repo = attack
    _policy_off(monkeypatch)
    prompts, outs = _session_run(repo, user, context=True)
    instructions = prompts[prompts.index("<instructions") :]
    # imports: the link to ~/.pgpass, `../..` into the home, the case trick, /proc, the diary
    leaked = set(_leaked(instructions))
    assert {"PGPASS-22", "HISTORY-33", "CASEKEY-66", "ENVIRON", "DIARY-99"} <= leaked
    skill, pgpass, history, environ, grep = outs
    assert "SSHKEY-11" in skill and "PGPASS-22" in pgpass and "HISTORY-33" in history
    assert "VAULT-44" in grep and "RCLONE-55" in grep
    assert "binary file" in environ  # read (its NULs keep it from being shown as text)
    assert "FOREIGN-RULES" not in prompts  # the owner check is not part of refusal()


def test_foreign_parent_file_is_read_once_it_is_the_users(attack):
    """The owner check's control: the same file, owned by the user, is read."""
    from m3agent.agent.instructions import find_instructions

    user, repo = attack
    os.chown(repo.parent / "AGENTS.md", os.geteuid(), os.getegid())
    found = find_instructions(repo, None)
    assert any("FOREIGN-RULES" in f.text for f in found)


def test_the_users_own_file_may_import_from_the_home_the_repositorys_may_not(attack):
    """The confinement's control: ~/.m3agent/AGENTS.md (the user's) imports the same diary
    that the repository's AGENTS.md may not, and it is read; a SKILL.md linked there is not."""
    from m3agent.agent.instructions import find_instructions

    user, repo = attack
    mine = _write(user / ".m3agent" / "AGENTS.md", "Mine. @~/notes/diary.md\n")
    found = {f.scope: f.text for f in find_instructions(repo, mine)}
    assert found["import"].strip() == "DIARY-99"
    link = repo / ".claude" / "skills" / "diary" / "SKILL.md"
    link.parent.mkdir()
    link.symlink_to(user / "notes" / "diary.md")
    with pytest.raises(ReadRefused, match="sandbox shows nothing"):
        HostReader(SandboxPolicy(workspace=repo)).read_text(link)


def test_commands_linked_to_secrets_are_problems_not_prompts(attack, monkeypatch):
    from m3agent.app.extensions import all_commands

    user, repo = attack
    settings = load_settings()
    commands, problems = all_commands(settings, repo)
    assert "sync" not in {c.name for c in commands}
    assert any("sync.md: not read (a secret location" in p for p in problems), problems
    _policy_off(monkeypatch)  # control
    commands, _ = all_commands(settings, repo)
    assert "RCLONE-55" in {c.name: c.body for c in commands}["sync"]


# ---- the policy itself, attacked by someone who read it -------------------------------------


def test_a_link_swapped_in_after_the_check_is_not_followed(attack, monkeypatch):
    """TOCTOU: the directory checked is exchanged for a link to ~/.ssh between the check and
    the open. The open follows no symlink (openat2 RESOLVE_NO_SYMLINKS, else O_NOFOLLOW steps):
    ELOOP, nothing read. Control: a plain open of the same name reads the key."""
    user, repo = attack
    d = repo / "docs"
    _write(d / "id_rsa", "harmless\n")
    reader = HostReader(SandboxPolicy(workspace=repo))
    real_check = reader.check

    def racing_check(path: Path) -> Path:
        real = real_check(path)
        (d / "id_rsa").unlink()
        d.rmdir()
        d.symlink_to(user / ".ssh")  # the swap, right after the check
        return real

    monkeypatch.setattr(HostReader, "check", lambda self, p: racing_check(p))
    with pytest.raises(ReadRefused, match="symlink appeared"):
        reader.read_text(d / "id_rsa")
    assert (d / "id_rsa").read_text() == "SSHKEY-11"  # control: the name now leads to the key


def test_a_hard_link_to_a_secret_is_not_read(attack):
    """A second name of ~/.ssh/id_rsa inside the repository resolves to itself; its link count
    gives it away. Control: the same bytes in a file of its own are read."""
    user, repo = attack
    link = repo / ".m3agent" / "commands" / "hl.md"
    os.link(user / ".ssh" / "id_rsa", link)
    reader = HostReader(SandboxPolicy(workspace=repo))
    with pytest.raises(ReadRefused, match="hard links"):
        reader.read_text(link)
    link.unlink()
    _write(link, "SSHKEY-11")
    assert reader.read_text(link) == "SSHKEY-11"


def test_the_users_own_directories_are_read_where_m3agent_keeps_its_data(tmp_path, home):
    """m3agent's data home is refused through a repository's path, but the user's skills kept
    there ($M3AGENT_HOME/skills) are read: `trusted` covers exactly those directories."""
    home.mkdir(parents=True, exist_ok=True)
    secret = _write(home / "config.toml", "api_key = 'KEY-77'\n")
    own = _write(home / "skills" / "mine" / "SKILL.md", SKILL)
    repo = tmp_path / "repo"
    link = repo / "SKILL.md"
    repo.mkdir()
    link.symlink_to(secret)
    policy = SandboxPolicy(workspace=repo)
    reader = HostReader(policy, trusted=(home / "skills",))
    assert "HELPER-BODY" in reader.read_text(own)
    with pytest.raises(ReadRefused, match="m3agent's own data"):
        reader.read_text(link)


def test_project_settings_linked_to_a_secret_are_refused(tmp_path, home, monkeypatch):
    """`.mcp.json` and `.m3agent/settings.json` are the repository's files: as links to a JSON
    secret (~/.docker/config.json) they are refused, not parsed and shown by `mcp list` or
    `hooks list`. Control: the policy off, the secret's text is printed."""
    from m3agent.app.cli import build_app
    from typer.testing import CliRunner

    user, repo = tmp_path / "user", tmp_path / "repo"
    docker = {
        "auths": {"r": {"auth": "DOCKER-88"}},
        "mcpServers": {"x": {"command": "DOCKER-88"}},
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "DOCKER-88"}]}]},
    }
    _write(user / ".docker" / "config.json", json.dumps(docker))
    monkeypatch.setenv("HOME", str(user))
    (repo / ".m3agent").mkdir(parents=True)
    (repo / ".mcp.json").symlink_to(user / ".docker" / "config.json")
    (repo / ".m3agent" / "settings.json").symlink_to(user / ".docker" / "config.json")

    def shown() -> str:
        runner = CliRunner()
        return "".join(
            runner.invoke(build_app(), [*args, "--cwd", str(repo)]).output
            for args in (["mcp", "list"], ["hooks", "list"])
        )

    out = shown()
    assert "DOCKER-88" not in out and "not read (a secret location" in out
    _policy_off(monkeypatch)
    assert "DOCKER-88" in shown()


def test_a_link_another_user_planted_above_the_repository_is_not_followed(attack):
    """/tmp-style: another user's symlink `AGENTS.md` in a parent directory leads to a file of
    the user's own; the link's owner gives it away. Control: the user's own link is read."""
    from m3agent.agent.instructions import find_instructions

    user, repo = attack
    foreign = repo.parent / "AGENTS.md"
    foreign.unlink()
    foreign.symlink_to(user / "notes" / "diary.md")
    os.chown(foreign, 65534, 65534, follow_symlinks=False)
    assert not any("DIARY-99" in f.text for f in find_instructions(repo, None))
    os.chown(foreign, os.geteuid(), os.getegid(), follow_symlinks=False)
    assert any("DIARY-99" in f.text for f in find_instructions(repo, None))


def test_ignore_files_that_never_end_are_no_rules_not_a_hang(tmp_path):
    """`.gitignore` a link to /dev/zero, `.ignore` a FIFO, `.m3agentignore` a link to
    /dev/zero: glob, grep and the snapshot's listing read them on the host. They are refused
    (a device, not a regular file) and the walk goes on. Control: the plain read the walker
    used blocks on the FIFO until a writer comes."""
    import threading

    from m3agent.agent.context.files import FileRules, list_candidates
    from m3agent.tools.ignore import walk

    repo = tmp_path / "repo"
    _write(repo / "a.txt", "a\n")
    (repo / ".gitignore").symlink_to("/dev/zero")
    (repo / ".m3agentignore").symlink_to("/dev/zero")
    os.mkfifo(repo / ".ignore")
    assert ("a.txt", False) in list(walk(repo))
    candidates, _ = list_candidates(repo, FileRules())
    assert "a.txt" in [c.path for c in candidates]

    done = threading.Event()
    reader = threading.Thread(target=lambda: ((repo / ".ignore").read_text(), done.set()))
    reader.start()
    assert not done.wait(0.3)  # the raw reader hangs on the FIFO
    os.close(os.open(repo / ".ignore", os.O_WRONLY))  # a writer comes and goes: EOF
    reader.join(5)
    assert done.is_set()


def test_project_settings_that_never_end_are_refused_not_read(tmp_path, home):
    """A repository's `.m3agent/permissions.json`, `.m3agent/settings.json` and `.mcp.json`
    as links to /dev/zero: every reader at session start refuses them (a device) at once."""
    from m3agent.app.hooks_settings import load_hooks
    from m3agent.app.mcp.settings import project_entries
    from m3agent.app.prefix_rules import load_prefixes, saved_rules

    repo = tmp_path / "repo"
    (repo / ".m3agent").mkdir(parents=True)
    for rel in (".m3agent/permissions.json", ".m3agent/settings.json", ".mcp.json"):
        (repo / rel).symlink_to("/dev/zero")
    assert load_prefixes(home, repo)[0] == []
    assert saved_rules(home, repo)[0] == []
    with pytest.raises(ValueError, match="system location"):
        load_hooks(home, home, repo)
    assert project_entries(repo, {})[0] == ()  # (not a regular file: not even looked at)
