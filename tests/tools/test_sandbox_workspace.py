"""Ordinary work inside the sandbox still works (with and without bubblewrap), read-only mode
refuses writes, and --add-dir roots are writable. Also pins the one documented cost of the
Landlock-only mode: entries directly in the workspace root cannot be created or removed by
commands while `.git` exists (Landlock cannot exempt a subpath from a directory's rights)."""

from __future__ import annotations

import pytest
from m3agent.tools.sandbox.policy import Limits, SandboxLayer, SandboxPolicy
from m3agent.tools.sandbox.report import probe
from m3agent.tools.sandbox.runner import Sandbox
from sandbox_support import CONFIGS, make_sandbox

WORK = (
    "set -e; cd src; echo 'x = 1' > new.py; mkdir -p pkg/sub; mv new.py pkg/sub/mod.py; "
    "python3 -c 'import sys; sys.path.insert(0, \"pkg/sub\"); import mod; print(mod.x)'; "
    'ln -s pkg/sub/mod.py alias.py; cat alias.py; rm -r pkg; echo tmp > "$TMPDIR/t"; '
    'cat "$TMPDIR/t"; git -C .. status --short | head -3; echo ok'
)


@pytest.mark.parametrize("config", CONFIGS)
def test_ordinary_work_succeeds(config, world):
    r = make_sandbox(config, world).run(WORK, timeout_s=60)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[0] == "1" and r.stdout.rstrip().endswith("ok")


@pytest.mark.parametrize("config", CONFIGS)
def test_top_level_entries(config, world):
    r = make_sandbox(config, world).run("touch top.txt && rm -rf src && echo done", timeout_s=30)
    if config == "bwrap":
        assert (
            r.exit_code == 0 and (world.ws / "top.txt").exists() and not (world.ws / "src").exists()
        )
    else:
        assert r.exit_code != 0 and "Permission denied" in r.stderr
        assert not (world.ws / "top.txt").exists()


@pytest.mark.parametrize("config", CONFIGS)
def test_read_only_mode_refuses_workspace_writes(config, world):
    disabled = frozenset() if config == "bwrap" else frozenset({SandboxLayer.BWRAP})
    policy = SandboxPolicy(workspace=world.ws, mode="read-only", disabled_layers=disabled)
    report = probe(policy)
    if not report.protective:
        pytest.skip("no confining layer on this machine")
    if config == "bwrap" and not report.is_active(SandboxLayer.BWRAP):
        pytest.skip(report.layer(SandboxLayer.BWRAP).detail)
    r = Sandbox(policy, report).run("cat src/main.py; echo x > src/main.py", timeout_s=30)
    assert "print('hi')" in r.stdout and r.exit_code != 0
    assert (world.ws / "src" / "main.py").read_text() == "print('hi')\n"


@pytest.mark.parametrize("config", CONFIGS)
def test_extra_writable_root(config, world):
    disabled = frozenset() if config == "bwrap" else frozenset({SandboxLayer.BWRAP})
    policy = SandboxPolicy(
        workspace=world.ws,
        extra_writable=(world.outside,),
        disabled_layers=disabled,
        limits=Limits(),
    )
    report = probe(policy)
    if config == "bwrap" and not report.is_active(SandboxLayer.BWRAP):
        pytest.skip(report.layer(SandboxLayer.BWRAP).detail)
    r = Sandbox(policy, report).run(f"echo added > {world.outside}/added.txt", timeout_s=30)
    assert r.exit_code == 0, r.stderr
    assert (world.outside / "added.txt").read_text() == "added\n"


@pytest.mark.parametrize("config", CONFIGS)
def test_git_works_with_a_hidden_global_config(config, world):
    """The home directory is hidden; an existing ~/.gitconfig (unreadable under Landlock,
    which git treats as fatal) must not break read-only git commands."""
    (world.home / ".gitconfig").write_text("[user]\n\tname = someone\n")
    r = make_sandbox(config, world).run(
        "git status --short && git config user.name; echo rc=$?", timeout_s=30
    )
    assert "rc=1" in r.stdout and "fatal" not in r.stderr, (r.stdout, r.stderr)  # no name: hidden


@pytest.mark.parametrize("config", CONFIGS)
def test_multiprocessing_semaphores(config, world):
    """POSIX semaphores live in /dev/shm: private and writable inside bubblewrap; without it
    the host's shared /dev/shm stays read-only (a documented cost)."""
    code = "import multiprocessing as m; print(m.Pool(2).map(abs, [-1, -2]))"
    r = make_sandbox(config, world).run(["python3", "-c", code], timeout_s=60)
    if config == "bwrap":
        assert r.exit_code == 0 and "[1, 2]" in r.stdout, r.stderr
    else:
        assert r.exit_code != 0 and "PermissionError" in r.stderr


def test_control_git_dies_on_unreadable_global_config(world):
    """Without GIT_CONFIG_GLOBAL=/dev/null (the user passing their own), Landlock's EACCES on
    ~/.gitconfig is fatal to git: why the runner sets it."""
    (world.home / ".gitconfig").write_text("[user]\n\tname = someone\n")
    sb = make_sandbox("no-bwrap", world, {"env_allow": ("GIT_CONFIG_GLOBAL",)})
    r = sb.run("git status --short", timeout_s=30)
    assert r.exit_code == 128 and "Permission denied" in r.stderr, r.stderr
