"""Issue 13, class 1: the host reads a command's output only through descriptors it opened
before launch, bounded in bytes and time, never by reopening a path the sandbox can replace.

Each attempt replaces every name its stdout could have (the name the old runner reopened,
`$TMPDIR/../stdout`, and whatever /proc/$$/fd/1 says) by a symlink to a secret, a FIFO or
/dev/zero. The control replays the same command against a host that reopens the file by path
(what the runner did before): there the secret is read, the FIFO hangs, /dev/zero is endless.
"""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time

import pytest
from sandbox_support import CONFIGS, SECRET, make_sandbox

REPLACE = r"""
echo BEFORE
n=0
for p in "$TMPDIR/../stdout" "$(readlink /proc/$$/fd/1 | sed 's/ (deleted)$//')"; do
  case "$p" in /*) ;; *) continue ;; esac  # "pipe:[N]" names no file: never litter the cwd
  rm -f "$p" 2>/dev/null
  if {make} 2>/dev/null; then n=$((n+1)); fi
done
echo "replaced $n" >&2
"""
ATTACKS = {
    "symlink-to-secret": 'ln -s "{secret}" "$p"',
    "fifo": 'mkfifo "$p"',
    "dev-zero": 'ln -s /dev/zero "$p"',
}


def _command(kind: str, secret: str) -> str:
    return REPLACE.replace("{make}", ATTACKS[kind].replace("{secret}", secret))


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", ATTACKS)
def test_output_name_replaced(kind, config, world):
    sb = make_sandbox(config, world)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    r = sb.run(_command(kind, str(world.home / ".ssh" / "id_rsa")), timeout_s=20)
    took = time.monotonic() - t0
    # The attack took place: at least the old name was replaced inside the sandbox...
    assert "replaced 1" in r.stderr or "replaced 2" in r.stderr, r.stderr
    # ...and the host read exactly what the command wrote, through its own descriptor.
    assert r.stdout == "BEFORE\n" and r.stdout_bytes == 7, r.stdout[:200]
    assert SECRET not in r.stdout + r.stderr
    assert not r.timed_out and took < 10, f"the host hung for {took:.1f}s"
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    assert grew < 50, f"the host grew by {grew:.0f} MB"


# -- control: the same commands against a host that reopens the output by path ----------------


def _legacy_run(tmp_path, command: str) -> str:
    """The old runner's shape: stdout to run_dir/stdout, TMPDIR=run_dir/tmp, no layers."""
    run_dir = tmp_path / "legacy-run"
    (run_dir / "tmp").mkdir(parents=True)
    with open(run_dir / "stdout", "wb") as out:
        subprocess.run(
            ["/bin/bash", "-c", command],
            stdout=out,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "TMPDIR": str(run_dir / "tmp")},
            timeout=20,
            cwd=run_dir,
        )
    return str(run_dir / "stdout")


def test_control_symlink_reopened_by_path_leaks(world, tmp_path):
    path = _legacy_run(tmp_path, _command("symlink-to-secret", str(world.home / ".ssh" / "id_rsa")))
    with open(path) as f:
        assert f.read() == SECRET


def test_control_fifo_reopened_by_path_hangs(world, tmp_path):
    path = _legacy_run(tmp_path, _command("fifo", ""))
    done = threading.Event()

    def reopen():
        with open(path, "rb") as f:
            f.read()
        done.set()

    threading.Thread(target=reopen, daemon=True).start()
    assert not done.wait(1.0), "the FIFO did not block the by-path reader"
    with open(path, "wb"):  # let the reader go
        pass


def test_control_dev_zero_reopened_by_path_is_endless(world, tmp_path):
    path = _legacy_run(tmp_path, _command("dev-zero", ""))
    assert os.stat(path).st_size == 0  # the old size check saw "small"...
    with open(path, "rb") as f:
        assert len(f.read(1 << 20)) == 1 << 20  # ...and the read never ends
