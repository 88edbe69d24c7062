"""Issue 21 item 2: races on the file tools.

While the tools repeat, a racer process swaps a workspace directory with a symlink to a fake
`~/.ssh` outside the workspace (renameat2 RENAME_EXCHANGE), as a command in the workspace
could. The tools check a canonical path, then open it by descriptor following no symlink
(openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, or the per-component O_NOFOLLOW walk), so
nothing lands in the fake `~/.ssh` and nothing of it comes back. Each control does the same
with the old check (realpath, then reopen by name) and sees the escape happen.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path

import pytest
from m3agent.tools import fdio
from m3agent.tools.base import ToolContext
from m3agent.tools.sandbox.policy import SandboxPolicy
from m3agent.tools.toolset import default_toolset
from race_support import Racer, settle
from sandbox_support import CONFIGS, make_sandbox, unprobed

SECRET = "SECRET-KEY-MATERIAL"
ATTACKER_KEY = "ssh-ed25519 AAAA attacker"
TRIES = 300
CONTROL_SECONDS = 20.0


@pytest.fixture
def scene(tmp_path):
    ws = tmp_path / "ws"
    (ws / "keys").mkdir(parents=True)
    (ws / "keys" / "id_rsa").write_text("harmless\n")
    (ws / "keys" / "authorized_keys").write_text("harmless\n")
    ssh = Path(tempfile.mkdtemp(prefix="m3-race-home-", dir="/var/tmp")) / ".ssh"
    ssh.mkdir()
    (ssh / "id_rsa").write_text(SECRET + "\n")
    (ssh / "planted_secret_name").write_text("x")  # a name only ~/.ssh has
    os.symlink(ssh, ws / "link")
    ctx = ToolContext(cwd=ws, sandbox=unprobed(SandboxPolicy(workspace=ws, home=ssh.parent)))
    yield ws, ssh, ctx
    settle(ws / "keys", ws / "link")


def _outside_effects(ssh: Path) -> list[str]:
    return sorted(n for n in os.listdir(ssh) if n not in ("id_rsa", "planted_secret_name"))


def _old_check(ws: Path, rel: str) -> str:
    """The check the tools used to make: realpath, then judged by where it lands."""
    real = os.path.realpath(ws / rel)
    if not real.startswith(str(ws) + "/"):
        raise PermissionError(real)
    return str(ws / rel)  # ...and then reopened by name


PATCH = (
    "*** Begin Patch\n*** Delete File: keys/authorized_keys\n"
    f"*** Add File: keys/authorized_keys\n+{ATTACKER_KEY}\n*** End Patch\n"
)
WRITES = {
    "write_file": {"path": "keys/authorized_keys", "content": ATTACKER_KEY},
    "apply_patch": {"patch": PATCH},
}


@pytest.mark.parametrize("tool", sorted(WRITES))
def test_write_race_lands_nothing_outside(scene, tool):
    ws, ssh, ctx = scene
    ts = default_toolset()
    outcomes: set[str] = set()
    with Racer(ws / "keys", ws / "link"):
        for _ in range(TRIES):
            r = ts.dispatch(tool, WRITES[tool], ctx)
            outcomes.add("ok" if not r.is_error else r.output.split(":", 1)[1][:30])
    assert _outside_effects(ssh) == []  # no key, no temp file in the fake ~/.ssh
    # The tool still works: between swaps, or (a loaded machine may lose every window) once the
    # racer has stopped; either way the refusals above were the race, not a broken tool.
    if "ok" not in outcomes:
        settle(ws / "keys", ws / "link")
        r = ts.dispatch(tool, WRITES[tool], ctx)
        assert not r.is_error, (r.output, outcomes)
        assert (ws / "keys" / "authorized_keys").read_text().strip() == ATTACKER_KEY


def test_a_patch_that_fails_part_way_under_race_never_loses_the_file(scene):
    """Delete then Add of one file: when the Add is refused because the directory was swapped,
    the undo of the Delete goes through the same directory descriptor, so the user's file is
    back (old or new text) after every attempt, and every refusal is a one-line patch error."""
    ws, ssh, ctx = scene
    ts = default_toolset()
    errors: set[str] = set()
    for _ in range(10):
        with Racer(ws / "keys", ws / "link"):
            for _ in range(TRIES // 10):
                r = ts.dispatch("apply_patch", {"patch": PATCH}, ctx)
                if r.is_error:
                    errors.add(r.output.split(":", 1)[0])
        settle(ws / "keys", ws / "link")
        assert (ws / "keys" / "authorized_keys").read_text().strip() in ("harmless", ATTACKER_KEY)
    assert _outside_effects(ssh) == []
    assert errors <= {"patch not applied, nothing changed"}, errors


def test_control_undo_by_name_loses_the_file_under_race(scene):
    """The undo the tool used to make: remove by path, and on a refused write put the old text
    back by path, which the swap sends elsewhere (refused): the file is gone."""
    ws, _, _ = scene
    target, shown = ws / "keys" / "authorized_keys", "keys/authorized_keys"

    def loses() -> bool:
        try:
            old = fdio.read_bytes(target, shown)
            fdio.unlink(target, shown)
        except fdio.FsRefused:
            return False
        try:
            fdio.write_atomic(target, ATTACKER_KEY.encode(), shown)
            return False
        except fdio.FsRefused:
            try:
                fdio.write_atomic(target, old, shown)
                return False
            except fdio.FsRefused:
                return True

    assert _ever_under_race(ws, loses)


def test_control_write_by_name_after_realpath_lands_outside(scene):
    ws, ssh, _ = scene
    deadline = time.monotonic() + CONTROL_SECONDS
    with Racer(ws / "keys", ws / "link"):
        while time.monotonic() < deadline and not _outside_effects(ssh):
            try:
                name = _old_check(ws, "keys/authorized_keys")
                with open(name, "w") as f:
                    f.write(ATTACKER_KEY)
            except OSError:
                continue
    assert "authorized_keys" in _outside_effects(ssh)


@pytest.mark.parametrize("tool", ["read_file", "edit_file", "grep", "list_dir", "glob"])
def test_reading_tools_race_return_no_secret(scene, tool):
    ws, ssh, ctx = scene
    ts = default_toolset()
    args = {
        "read_file": {"path": "keys/id_rsa"},
        "edit_file": {"path": "keys/id_rsa", "old_string": "SECRET", "new_string": "pwned"},
        "grep": {"pattern": "SECRET|harmless", "path": "keys"},
        "list_dir": {"path": "keys"},
        "glob": {"pattern": "keys/*"},
    }[tool]
    ok, refusals = 0, set()
    with Racer(ws / "keys", ws / "link"):
        for _ in range(TRIES):
            r = ts.dispatch(tool, args, ctx)
            if r.is_error:
                refusals.add(r.output[:120])
            assert SECRET not in r.output
            assert SECRET not in str(r.metadata.get("diff", ""))
            if tool == "list_dir":  # never ~/.ssh's listing (it has no authorized_keys)
                assert "authorized_keys" in r.output or r.is_error
            # glob may show a name both directories have; never one only ~/.ssh has
            assert "planted_secret_name" not in r.output
            ok += not r.is_error
    assert (ssh / "id_rsa").read_text() == SECRET + "\n"  # edit_file never changed it
    if tool != "edit_file" and ok == 0:  # (edit_file finds no "SECRET" in the workspace's file)
        # Every call under the race was refused (a loaded machine can leave the swap on the
        # secret side for all of them: fresh-clone CI saw it twice): the tool must still work
        # once the race is over, or it refuses everything, which this test is not after.
        r = ts.dispatch(tool, args, ctx)
        assert not r.is_error, (r.output, sorted(refusals)[:5])


def _ever_under_race(ws, attempt) -> bool:
    """Whether ATTEMPT() returns true once while the racer swaps keys/ and link, tried again
    and again for at most CONTROL_SECONDS."""
    deadline = time.monotonic() + CONTROL_SECONDS
    with Racer(ws / "keys", ws / "link"):
        while time.monotonic() < deadline:
            if attempt():
                return True
    return False


def test_control_read_by_name_after_realpath_returns_secret(scene):
    ws, _, _ = scene

    def leaks() -> bool:
        try:
            with open(_old_check(ws, "keys/id_rsa")) as f:
                return SECRET in f.read()
        except OSError:
            return False

    assert _ever_under_race(ws, leaks)


@pytest.mark.parametrize("use_openat2", [True, False], ids=["openat2", "nofollow-walk"])
def test_descriptor_layer_under_race_both_resolvers(scene, use_openat2):
    """fdio itself, with the kernel's openat2 and with the per-component fallback walk."""
    ws, ssh, _ = scene
    target = ws / "keys" / "id_rsa"
    refused = 0
    with Racer(ws / "keys", ws / "link"):
        for _ in range(TRIES):
            try:
                data = fdio.read_bytes(target, "keys/id_rsa", use_openat2=use_openat2)
                assert SECRET.encode() not in data
                fdio.write_atomic(
                    ws / "keys" / "authorized_keys",
                    ATTACKER_KEY.encode(),
                    "keys/authorized_keys",
                    use_openat2=use_openat2,
                )
            except fdio.FsRefused as e:
                # the swap seen as a symlink (ELOOP), as gone (ENOENT), or as a non-directory
                # in the middle of the walk (ENOTDIR: the nofollow walk's O_DIRECTORY open)
                assert any(
                    why in str(e) for why in ("symlink appeared", "no such", "not a directory")
                ), e
                refused += 1
    assert _outside_effects(ssh) == []
    assert refused > 0  # the race really hit the checked path


# -- the racer as a sandboxed command (the attacker the issue names), with and without bwrap

_TIMED_RACER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b, until = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2]), time.time() + float(sys.argv[3])
n = 0
while time.time() < until:
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
    n += 1
if n % 2:
    libc.renameat2(-100, a, -100, b, 2)
print("swaps", n)
"""


@pytest.mark.parametrize("config", CONFIGS)
def test_race_from_a_sandboxed_command(world, config):
    sub = world.ws / "src"  # not the root: without bwrap Landlock keeps the root's entries
    (sub / "keys").mkdir()
    (sub / "keys" / "id_rsa").write_text("harmless\n")
    os.symlink(world.home / ".ssh", sub / "link")
    sb = make_sandbox(config, world)
    ctx = ToolContext(cwd=world.ws, sandbox=sb)
    ts = default_toolset()
    box: list = []
    racer = threading.Thread(
        target=lambda: box.append(
            sb.run(
                ["python3", "-c", _TIMED_RACER, str(sub / "keys"), str(sub / "link"), "6"],
                cwd=sub,
                timeout_s=60,
            )
        )
    )
    racer.start()
    time.sleep(1.5)  # the sandbox starting
    calls = 0
    while racer.is_alive():
        w = ts.dispatch(
            "write_file", {"path": "src/keys/authorized_keys", "content": ATTACKER_KEY}, ctx
        )
        r = ts.dispatch("read_file", {"path": "src/keys/id_rsa"}, ctx)
        assert "TOP-SECRET" not in r.output and "TOP-SECRET" not in w.output
        calls += 1
    racer.join()
    res = box[0]
    assert res.exit_code == 0 and "swaps" in res.stdout, res.stderr
    assert int(res.stdout.split()[-1]) > 100 and calls > 10
    assert sorted(os.listdir(world.home / ".ssh")) == ["id_rsa"]  # nothing landed there


def test_control_walk_by_name_lists_outside_names(scene):
    """The name walk alone (what glob shows without its descriptor check) lists ~/.ssh."""
    from m3agent.tools.ignore import walk

    ws, _, _ = scene
    assert _ever_under_race(
        ws, lambda: any("planted_secret_name" in rel for rel, _ in walk(ws, respect_ignore=False))
    )
