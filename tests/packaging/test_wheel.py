"""The wheel installs under one namespace (m3agent.*), never as bare app/engine/agent/tools."""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from ..support.venvs import purelib

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    (whl,) = out.glob("m3agent-*.whl")
    return whl


def test_wheel_layout_is_namespaced(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.startswith("m3agent-")}
    assert tops == {"m3agent"}, tops
    for pkg in ("app", "engine", "agent", "tools"):
        assert f"m3agent/{pkg}/__init__.py" in names
    # every package folder in the source tree made it into the wheel
    for init in ROOT.glob("*/**/__init__.py"):
        rel = init.relative_to(ROOT)
        if rel.parts[0] in ("app", "engine", "agent", "tools"):
            assert f"m3agent/{rel.as_posix()}" in names, rel
    # data files ship too (tokenizer, TUI stylesheets)
    for data in ROOT.glob("*/**/*.tcss"):
        rel = data.relative_to(ROOT)
        if rel.parts[0] in ("app", "engine", "agent", "tools"):
            assert f"m3agent/{rel.as_posix()}" in names, rel


def test_wheel_imports_in_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    # install without dependencies by unpacking the wheel: the check is the layout, not pip
    site = str(purelib(py))
    zipfile.ZipFile(wheel).extractall(site)
    # Third-party dependencies come from the test's own environment, appended after the
    # fresh site-packages (a plain path line: that folder's .pth files, among them the
    # editable-install finder, are not executed).
    deps = next(p for p in sys.path if p.endswith("site-packages"))
    (Path(site) / "zz_deps.pth").write_text(deps + "\n")
    code = (
        "import importlib.util, m3agent.engine.api, m3agent.agent.events, m3agent.tools.base;"
        "assert all(importlib.util.find_spec(n) is None for n in ('app','engine','agent','tools'));"
        "print(m3agent.engine.api.__file__)"
    )
    out = subprocess.run([str(py), "-I", "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip().startswith(site)
