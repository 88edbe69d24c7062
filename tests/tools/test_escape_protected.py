"""Issue 13, class 3: `.git`, `.m3agent` and the per-project files (`.m3agentignore`,
AGENTS.md, CLAUDE.md) are protected before they exist.

A command can neither create, change, replace nor point them elsewhere in the workspace root:
with bubblewrap an absent `.git`/`.m3agent` is an empty read-only directory mounted in its
place, removed again after the command, and whatever a command creates under an absent file
name is renamed aside after it (never deleted: it may hold something moved there); with
Landlock alone the workspace root grants no write right at all. Below the root no layer can
refuse one name, so a command *can* create `src/.git` (pinned here; the agent's own git never
runs a nested repository, see the gitsafe work); the file tools refuse these names at any
depth. Each control runs the same attempt with the confining layers off and sees it succeed.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from m3agent.tools.base import ToolContext
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxMode, SandboxPolicy
from m3agent.tools.sandbox.runner import Sandbox
from m3agent.tools.toolset import default_toolset
from sandbox_support import CONFIGS, action_argv, make_sandbox, result_of, unprobed


@pytest.fixture
def bare(world):
    """A workspace that is not (yet) a repository: no .git, .m3agent or AGENTS.md."""
    subprocess.run(["rm", "-rf", str(world.ws / ".git")], check=True)
    return world


def _entries(ws):
    return sorted(p.name for p in ws.iterdir())


# (attempt id) -> (argv for workspace ws, {config: (layer, errno)})
ATTEMPTS = {
    "git-init-with-fsmonitor": (
        lambda ws: action_argv("plant_git", ws, "dir"),
        {"bwrap": ("bwrap", "EROFS"), "no-bwrap": ("landlock", "EACCES")},
    ),
    "git-file-pointing-elsewhere": (
        lambda ws: action_argv("plant_git", ws, "file"),
        {"bwrap": ("bwrap", "EISDIR"), "no-bwrap": ("landlock", "EACCES")},
    ),
    "git-symlink-elsewhere": (
        lambda ws: action_argv("plant_git", ws, "link"),
        {"bwrap": ("bwrap", "EEXIST"), "no-bwrap": ("landlock", "EACCES")},
    ),
    "git-by-rename": (
        lambda ws: action_argv("replace", ws / "src" / "g", ws / ".git"),
        {"bwrap": ("bwrap", "EBUSY"), "no-bwrap": ("landlock", "EACCES")},
    ),
    "create-m3agent-dir": (
        lambda ws: action_argv("mkdir_write", ws / ".m3agent" / "state"),
        {"bwrap": ("bwrap", "EROFS"), "no-bwrap": ("landlock", "EACCES")},
    ),
    "create-agents-md": (
        lambda ws: action_argv("write", ws / "AGENTS.md"),
        {"bwrap": ("bwrap", "set-aside"), "no-bwrap": ("landlock", "EACCES")},
    ),
    "create-m3agentignore": (
        lambda ws: action_argv("write", ws / ".m3agentignore"),
        {"bwrap": ("bwrap", "set-aside"), "no-bwrap": ("landlock", "EACCES")},
    ),
}


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_protected_name_cannot_be_created(attempt, config, bare):
    ws = bare.ws
    before = _entries(ws)
    make_argv, expect = ATTEMPTS[attempt]
    r = make_sandbox(config, bare).run(make_argv(ws), timeout_s=30)
    got = result_of(r)
    layer, err = expect[config]
    if err == "set-aside":  # a file name: it exists during the run, and is renamed after it
        name = make_argv(ws)[-1].rsplit("/", 1)[-1]
        assert got["ok"] and len(r.set_aside) == 1 and f"/{name}.m3agent-blocked-" in r.set_aside[0]
        assert not (ws / name).exists()
        os.unlink(r.set_aside[0])
    else:
        assert layer in r.layers and not got["ok"] and got["errno"] == err, got
    # Outside effect: nothing new in the root, and no placeholder left behind.
    assert _entries(ws) == before
    assert not (ws / ".git").exists() and not (ws / ".git").is_symlink()


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_control_protected_name_created_unprotected(attempt, bare):
    sb = Sandbox(
        SandboxPolicy(
            workspace=bare.ws,
            mode=SandboxMode.FULL_ACCESS,
            dangerously_no_sandbox=True,
            disabled_layers=frozenset(
                {SandboxLayer.BWRAP, SandboxLayer.LANDLOCK, SandboxLayer.SECCOMP}
            ),
        )
    )
    got = result_of(sb.run(ATTEMPTS[attempt][0](bare.ws), timeout_s=30))
    assert got["ok"], got


@pytest.mark.parametrize("config", CONFIGS)
def test_existing_agents_md_cannot_be_changed(config, bare):
    (bare.ws / "AGENTS.md").write_text("be careful\n")
    r = make_sandbox(config, bare).run(action_argv("write", bare.ws / "AGENTS.md"), timeout_s=30)
    got = result_of(r)
    assert not got["ok"] and got["errno"] == ("EROFS" if config == "bwrap" else "EACCES"), got
    assert (bare.ws / "AGENTS.md").read_text() == "be careful\n"


@pytest.mark.parametrize("config", CONFIGS)
def test_git_in_sandbox_sees_no_repository_it_could_make(config, bare):
    """The real thing: `git init` and `git config core.fsmonitor` inside the sandbox fail."""
    r = make_sandbox(config, bare).run(
        "git init -q . && git config core.fsmonitor 'touch /tmp/pwned' && echo planted",
        timeout_s=30,
    )
    assert r.exit_code != 0 and "planted" not in r.stdout, r.stdout
    assert not (bare.ws / ".git").exists()


@pytest.mark.parametrize("config", CONFIGS)
def test_nested_repository_below_root_is_not_refused_by_layers(config, bare):
    """The documented gap: no layer can refuse one name below the root."""
    r = make_sandbox(config, bare).run(
        action_argv("plant_git", bare.ws / "src", "dir"), timeout_s=30
    )
    assert result_of(r)["ok"]
    assert (bare.ws / "src" / ".git" / "config").is_file()


@pytest.mark.parametrize(
    "path", [".git/config", "src/.git/config", ".m3agent/x", "AGENTS.md", "src/.git"]
)
def test_file_tools_refuse_protected_names_at_any_depth(path, bare):
    ctx = ToolContext(cwd=bare.ws, sandbox=unprobed(SandboxPolicy(workspace=bare.ws)))
    r = default_toolset().dispatch("write_file", {"path": path, "content": "x"}, ctx)
    assert r.is_error and r.metadata.get("blocked_by") == "path_guard", r.output
    assert not (bare.ws / path).exists()


@pytest.fixture
def own_source(bare, monkeypatch):
    """m3agent run on its own source tree: the launcher's package lies in the workspace."""
    import shutil

    from m3agent.tools.sandbox import boot

    pkg = bare.ws / "tools" / "sandbox"
    shutil.copytree(boot.PKG_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(boot, "PKG_DIR", pkg)  # the launcher really runs from this copy
    return pkg


@pytest.mark.parametrize("config", CONFIGS)
def test_launcher_package_in_workspace_is_read_only(config, bare, own_source):
    launch = own_source / "launch.py"
    before = launch.read_text()
    r = make_sandbox(config, bare).run(action_argv("write", launch), timeout_s=30)
    got = result_of(r)
    assert r.started and not got["ok"], got
    assert got["errno"] == ("EROFS" if config == "bwrap" else "EACCES"), got
    assert launch.read_text() == before
    r = make_sandbox(config, bare).run(
        action_argv("write", own_source / "__pycache__" / "x.pyc"), timeout_s=30
    )
    assert not result_of(r)["ok"]


def test_control_launcher_package_writable_unconfined(bare, own_source):
    sb = Sandbox(
        SandboxPolicy(
            workspace=bare.ws,
            dangerously_no_sandbox=True,
            disabled_layers=frozenset(
                {SandboxLayer.BWRAP, SandboxLayer.LANDLOCK, SandboxLayer.SECCOMP}
            ),
        )
    )
    assert result_of(sb.run(action_argv("write", own_source / "launch.py"), timeout_s=30))["ok"]
