"""Building the CPU kernel when other processes build it too, or one died halfway."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

import pytest
from m3agent.engine.offload.cpu_kernel import build_kernel


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private build (a copied one rebuilds anyway: the folder's path is in its build file)."""
    root = tmp_path_factory.mktemp("kernels")
    status = build_kernel(root)
    if status.module is None:
        pytest.skip(f"no CPU kernel here: {status.reason}")
    return root


def folder(root: Path) -> Path:
    (built,) = (p for p in root.iterdir() if p.is_dir())
    return built


def test_a_lock_left_by_a_dead_build_does_not_block_the_next(root: Path) -> None:
    built = folder(root)
    (built / "lock").touch()  # what torch leaves when its builder is killed
    status = build_kernel(root, wait_s=30)
    assert status.module is not None, status.reason
    assert status.reason == str(built)
    assert not (built / "lock").exists()


def test_control_torch_alone_waits_on_that_lock_forever(root: Path) -> None:
    built = folder(root)
    (built / "lock").touch()
    probe = (
        "from torch.utils.cpp_extension import load_inline\n"
        "from m3agent.engine.offload.cpu_kernel import CFLAGS, SOURCE\n"
        f"load_inline(name={built.name!r}, cpp_sources=[SOURCE], functions=['moe_forward'],"
        f" extra_cflags=list(CFLAGS), extra_ldflags=['-fopenmp'], build_directory={str(built)!r})\n"
    )
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            subprocess.run([sys.executable, "-c", probe], timeout=8, capture_output=True)
    finally:
        (built / "lock").unlink()


def test_a_live_build_elsewhere_is_waited_for_then_reported(root: Path) -> None:
    built = folder(root)
    with open(root / f"{built.name}.lock", "a+b") as other:  # another builder holds it
        fcntl.flock(other, fcntl.LOCK_EX)
        status = build_kernel(root, wait_s=0.5)
    assert status.module is None
    assert "another process has been building" in status.reason
    assert build_kernel(root, wait_s=0.5).module is not None  # released: it loads
