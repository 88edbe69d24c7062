"""The scan workers (`python -m m3agent.agent.context.scan_worker`) start in the agent's
working directory, the workspace: `-m` would put it first on sys.path, and a `m3agent/`
package the model planted there would run on the host, as the user, at the next session's
scan. The workers run with -P (scan_pool.WORKER); the control starts them without it."""

from __future__ import annotations

import sys

from m3agent.agent.context import scan_pool
from m3agent.agent.context.files import FileRules


def _scan_from(ws, monkeypatch) -> None:
    monkeypatch.chdir(ws)
    monkeypatch.setattr(scan_pool, "_cores", lambda: 2)  # workers even on a one-core runner
    scanner = scan_pool.Scanner(FileRules(), min_bytes=0)
    scanner.add("a.py", b"x = 1\n")
    scanner.add("b.py", b"y = 2\n")
    assert [p for p, _ in scanner.results()] == ["a.py", "b.py"]


def test_a_planted_package_in_the_workspace_is_not_imported_by_the_workers(tmp_path, monkeypatch):
    ws, marker = tmp_path / "ws", tmp_path / "planted-ran"
    (ws / "m3agent").mkdir(parents=True)
    (ws / "m3agent" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    _scan_from(ws, monkeypatch)
    assert not marker.exists()
    # Control: the same workers without -P import the planted package.
    monkeypatch.setattr(scan_pool, "WORKER", (sys.executable, "-m", *scan_pool.WORKER[3:]))
    _scan_from(ws, monkeypatch)
    assert marker.exists()
