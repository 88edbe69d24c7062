"""Issue 13, class 11: the sandbox works whatever the install layout, driven through the
installed `m3agent` console script with bubblewrap active, and a tool that could not run is
never reported as a success.

The installs are real: a copy of this tree under /tmp (where bubblewrap's private /tmp hides
it), installed editable, as a plain wheel, and pipx-style (an isolated venv under $HOME,
which bubblewrap also hides) into fresh venvs with `--no-deps` (the
dependencies come from this venv's site-packages through a .pth line, so nothing is
downloaded). The control runs the launcher the way it used to be started (`python -m
m3agent.tools.sandbox.launch`) from the editable install: bubblewrap hides the source tree
and the import fails.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from m3agent.tools.sandbox import boot
from m3agent.tools.sandbox.policy import SandboxLayer, SandboxPolicy
from m3agent.tools.sandbox.report import probe
from m3agent.tools.sandbox.runner import Sandbox
from m3agent.tools.shell import Shell, ShellArgs

from ..support.venvs import purelib

REPO = Path(__file__).resolve().parents[2]
NS = "]<]minimax[>["


def _need_bwrap(tmp: Path) -> None:
    if not probe(SandboxPolicy(workspace=tmp)).is_active(SandboxLayer.BWRAP):
        pytest.skip("bubblewrap unavailable on this machine")


def _venv(root: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    py = root / "bin" / "python"
    (purelib(py) / "zz-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return py


def _pip_install(py: Path, *args: str) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.fixture(scope="module")
def installs():
    if not shutil.which("git"):
        pytest.skip("git is needed to list the tree")
    base = Path(tempfile.mkdtemp(prefix="m3-install-", dir="/tmp"))
    try:
        _need_bwrap(base)  # before spending ~10 s on the installs
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    clone = base / "clone"
    clone.mkdir()
    files = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard", "-z"],
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for rel in filter(None, files):
        src = REPO / os.fsdecode(rel)
        if src.is_file():
            (clone / os.fsdecode(rel)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, clone / os.fsdecode(rel))
    editable = _venv(base / "venv-editable")
    _pip_install(editable, "-e", str(clone))
    plain = _venv(base / "venv-plain")
    _pip_install(plain, str(clone))
    # pipx's layout: an isolated venv under the user's home, which bubblewrap hides
    pipx = _venv(base / "home" / ".local" / "pipx" / "venvs" / "m3agent")
    _pip_install(pipx, str(clone))
    yield {"base": base, "clone": clone, "editable": editable, "plain": plain, "pipx": pipx}
    shutil.rmtree(base, ignore_errors=True)


def _script(path: Path) -> Path:
    call = (
        f'</mm:think>{NS}<tool_call>\n{NS}<invoke name="shell">{NS}<command>'
        f"echo SANDBOXED-OK; touch /etc/m3agent-install-escape || echo ROOT-READ-ONLY"
        f"{NS}</command>{NS}</invoke>\n{NS}</tool_call>"
    )
    path.write_text(json.dumps([call, "</mm:think>done"]))
    return path


def _run_console_script(py: Path, base: Path, name: str) -> dict:
    repo = base / f"repo-{name}"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.txt").write_text("hi\n")
    exe = py.parent / "m3agent"
    assert exe.is_file(), "the console script was not installed"
    env = {**os.environ, "M3AGENT_HOME": str(base / f"home-{name}")}
    if name == "pipx":
        env["HOME"] = str(base / "home")
    env.pop("M3AGENT_CONFIG", None)
    r = subprocess.run(
        [
            str(exe),
            "run",
            "go",
            "--engine",
            "scripted",
            "--script",
            str(_script(base / f"script-{name}.json")),
            "--output-format",
            "stream-json",
            "--cwd",
            str(repo),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=base,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    evs = [json.loads(ln) for ln in r.stdout.splitlines() if ln.strip()]
    return next(e for e in evs if e["type"] == "tool_call_finished")


@pytest.mark.parametrize("layout", ["editable", "plain", "pipx"])
def test_console_script_runs_sandboxed_shell(layout, installs):
    _need_bwrap(installs["base"])
    done = _run_console_script(installs[layout], installs["base"], layout)
    assert not done["is_error"], done["output"]
    assert "SANDBOXED-OK" in done["output"] and "ROOT-READ-ONLY" in done["output"], done["output"]
    assert "bwrap" in done["metadata"]["layers"]
    assert not os.path.exists("/etc/m3agent-install-escape")


def test_control_module_launch_fails_for_editable_under_tmp(installs):
    """The launcher started as `python -m` (before this fix) cannot import itself there."""
    _need_bwrap(installs["base"])
    py = installs["editable"]
    ws = installs["base"] / "ws-control"
    ws.mkdir()
    code = (
        "import sys, tempfile, pathlib, subprocess\n"
        "from m3agent.tools.sandbox import bwrap\n"
        "from m3agent.tools.sandbox.policy import SandboxPolicy\n"
        f"p = SandboxPolicy(workspace={str(ws)!r})\n"
        "rd = pathlib.Path(tempfile.mkdtemp()); (rd / 'box').mkdir()\n"
        "b = bwrap.argv(p, rd, p.workspace)\n"
        "# the old bind set: the venv and every sys.path entry under /tmp\n"
        "old = [x for e in {sys.prefix, *sys.path} if e.startswith('/tmp/') and\n"
        "       pathlib.Path(e).is_dir() for x in ('--ro-bind', e, e)]\n"
        "argv = b[:-1] + old + ['--', sys.executable, '-E', '-s', '-m',\n"
        "    'm3agent.tools.sandbox.launch', '{}', '--', 'true']\n"
        "r = subprocess.run(argv, capture_output=True, text=True)\n"
        "print(r.returncode, r.stderr)\n"
    )
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, timeout=60)
    assert "No module named 'm3agent.tools'" in out.stdout, out.stdout + out.stderr


@pytest.mark.parametrize("launcher", ["python", "helper"])
def test_launcher_that_cannot_start_is_an_error_not_a_success(tmp_path, monkeypatch, launcher):
    """Whatever keeps the launcher from confining and starting the command, the shell tool
    says the command never ran (blocked_by=sandbox_failed), whatever the exit code."""
    sb = Sandbox(SandboxPolicy(workspace=tmp_path), use_helper=launcher == "helper")
    if not sb.report.protective:
        pytest.skip("no confining layer on this machine")
    if launcher == "helper":
        if sb.helper is None or not sb.report.is_active(SandboxLayer.BWRAP):
            pytest.skip("the helper runs under bubblewrap, and needs a C compiler")
        sb.helper = tmp_path / "no-such-helper"  # the compiled helper missing at launch
    else:
        monkeypatch.setattr(boot, "PKG_DIR", tmp_path / "no-such-package")
    from m3agent.tools.base import ToolContext

    marker = tmp_path / "ran"
    res = Shell().run(
        ShellArgs(command=f"touch {marker}; exit 0"), ToolContext(cwd=tmp_path, sandbox=sb)
    )
    assert res.is_error and res.metadata["blocked_by"] == "sandbox_failed", res.output
    assert "could not start the command" in res.output
    assert not marker.exists()
